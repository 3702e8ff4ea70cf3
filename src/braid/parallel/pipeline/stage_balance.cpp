#include "braid/parallel/pipeline/stage_balance.h"

#include <algorithm>
#include <chrono>

#include "braid/autograd/variable.h"
#include "braid/core/error.h"
#include "braid/core/rng.h"
#include "braid/nn/transformer.h"

namespace braid::parallel::pipeline {

namespace {

struct Costs {
  double embeddings = 0, block = 0, head = 0;
};

// Every block has the same parameters, so a one-block model of the config tells them (a
// 126-layer one is not declared for it).
Costs parameter_costs(nn::ModelConfig config) {
  config.n_layer = 1;
  nn::TransformerOptions declared;
  declared.materialize = false;
  const nn::Transformer model(config, declared);
  const auto& units = model.layout().units();
  Costs c;
  c.embeddings = static_cast<double>(units.front().numel);
  c.block = static_cast<double>(units[1].numel);
  c.head = static_cast<double>(units.back().numel);
  if (config.tie_word_embeddings)  // the head reads the token table too
    c.head += static_cast<double>(config.vocab_size * config.d_model);
  return c;
}

// Median of five timings (after one warm-up) of fn, in milliseconds.
template <typename Fn>
double time_ms(Fn fn) {
  std::vector<double> t;
  for (int i = 0; i < 6; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (i > 0) t.push_back(ms);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

Costs measured_costs(nn::ModelConfig config, int64_t batch, int64_t seq_len) {
  config.n_layer = 1;
  nn::TransformerOptions o;
  o.seed = 1;
  nn::Transformer model(config, o);
  Rng rng(7);
  std::vector<int32_t> tokens(static_cast<size_t>(batch * seq_len));
  for (auto& t : tokens)
    t = static_cast<int32_t>(rng.uniform() * static_cast<double>(config.vocab_size - 1));
  const Tensor ids = Tensor::from_vector(tokens, Shape{batch, seq_len});
  auto leaf = [&] {
    autograd::NoGradGuard no_grad;
    model.begin_forward(ids);
    autograd::Variable x(model.embed(ids).value().clone(), true);
    x.zero_grad();
    return x;
  };
  auto ones_like = [](const autograd::Variable& v) {
    Tensor g = Tensor::empty(v.shape(), v.value().dtype(), MemCategory::activations);
    g.fill_(1.0f);
    return g;
  };
  Costs c;
  c.embeddings = time_ms([&] {
    model.zero_grad();
    model.begin_forward(ids);
    autograd::Variable y = model.embed(ids);
    y.backward(ones_like(y));
  });
  c.block = time_ms([&] {
    model.zero_grad();
    autograd::Variable x = leaf();
    autograd::Variable y = model.run_layers(x, 0, 1);
    y.backward(ones_like(y));
  });
  c.head = time_ms([&] {
    model.zero_grad();
    autograd::Variable x = leaf();
    model.head_loss(x, ids).backward();
  });
  return c;
}

// A model of the user's, declared whole: its own units (the tied parameters count on the last
// stage too, which reads them).
std::vector<BlockRange> plan_declared(const nn::StagedModel& model, const PipelineOptions& options,
                                      int pp) {
  const int n = static_cast<int>(model.num_layers());
  if (options.balance == "uniform") return uniform_partition(n, pp, options.chunks);
  BRAID_CHECK(options.balance == "parameters", "parallel.pipeline_balance '", options.balance,
              "' measures a Transformer's blocks; this model is split by 'uniform' or "
              "'parameters'");
  const auto& units = model.layout().units();
  BRAID_CHECK(static_cast<int>(units.size()) == n + 2,
              "a pipeline splits a model declared as its "
              "first part, one unit per layer and its last part (",
              n + 2, " units for ", n, " layers); this one declares ", units.size());
  std::vector<double> layers;
  for (int i = 1; i <= n; ++i)
    layers.push_back(static_cast<double>(units[static_cast<size_t>(i)].numel));
  double last = static_cast<double>(units.back().numel);
  for (const std::string& name : model.tied_parameters())
    last += static_cast<double>(model.layout().param(name).numel);
  return balanced_partition(layers, static_cast<double>(units.front().numel), last, pp,
                            options.chunks);
}

}  // namespace

std::vector<BlockRange> plan_stages(const nn::StagedModel& model, const PipelineOptions& options,
                                    int pp, comm::ProcessGroup& world) {
  if (const auto* t = dynamic_cast<const nn::Transformer*>(&model))
    return plan_stages(t->config(), options, pp, world);
  return plan_declared(model, options, pp);
}

std::vector<BlockRange> parameter_partition(const nn::ModelConfig& config, int pp, int v) {
  const Costs c = parameter_costs(config);
  return balanced_partition(std::vector<double>(static_cast<size_t>(config.n_layer), c.block),
                            c.embeddings, c.head, pp, v);
}

std::vector<std::string> balance_names() {
  return {"uniform", "parameters", "time"};
}

std::vector<BlockRange> plan_stages(const nn::ModelConfig& config, const PipelineOptions& options,
                                    int pp, comm::ProcessGroup& world) {
  const int n = static_cast<int>(config.n_layer);
  const std::string& how = options.balance;
  if (how == "uniform") return uniform_partition(n, pp, options.chunks);
  if (how == "parameters") return parameter_partition(config, pp, options.chunks);
  BRAID_CHECK(how == "time", "config key 'parallel.pipeline_balance' is '", how,
              "', expected one of: uniform, parameters, time");
  // Measured on the host, and agreed on in a host tensor, whatever the default device (the
  // blocks' relative costs are what the split needs).
  DeviceScope host(Device::cpu());
  Tensor t = Tensor::zeros(Shape{3});
  if (world.rank() == 0) {
    const Costs m = measured_costs(config, options.micro_batch, options.seq_len);
    t.data<float>()[0] = static_cast<float>(m.embeddings);
    t.data<float>()[1] = static_cast<float>(m.block);
    t.data<float>()[2] = static_cast<float>(m.head);
  }
  world.broadcast(t, 0)->wait();
  const Costs c{t.data<float>()[0], t.data<float>()[1], t.data<float>()[2]};
  return balanced_partition(std::vector<double>(static_cast<size_t>(n), c.block), c.embeddings,
                            c.head, pp, options.chunks);
}

}  // namespace braid::parallel::pipeline
