// A user's training loop on braid's Accelerator: an MLP classifier (a model braid knows nothing
// about) on a synthetic Gaussian-mixture dataset, trained under whatever layout the config
// names (ddp, zero1-3, fsdp, and pipeline stages), on however many ranks `braid launch` started.
//
//   train_mlp CONFIG.yaml [--deepspeed DS.json | --accelerate-config ACC.yaml]
//             [--set section.key=value ...] [--save DIR] [--resume DIR] [--steps N]
//
// --save writes a training checkpoint at the end, --resume continues from one (saved under any
// strategy and world size), --steps stops after N steps of this invocation.
//
// Prints the loss as it trains, then the held-out accuracy and a hash of the final weights
// (bit-identical runs print the same hash).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "braid/autograd/functions.h"
#include "braid/nn/linear.h"
#include "braid/nn/staged_model.h"
#include "braid/train/accelerator.h"

namespace {

using braid::Shape;
using braid::Tensor;
using braid::autograd::Variable;

constexpr int64_t kFeatures = 16, kHidden = 64, kClasses = 4;
constexpr int kLayers = 2;  // hidden layers
constexpr int64_t kTrainSamples = 2048, kTestSamples = 512;

// The model: declared modules and parameters, then its units, one per layer: ZeRO-3 and FSDP
// gather one layer at a time, and a pipeline (parallel.pipeline_parallel_size) splits the layers
// into stages. As an nn::StagedModel it says its parts: the first layer takes the features, the
// hidden layers follow one another, the output layer turns the activation into the loss. No
// storage until the Accelerator prepares it.
class Mlp : public braid::nn::StagedModel {
 public:
  // compute: the dtype the prepared parameters are in (Accelerator::compute_dtype()).
  explicit Mlp(braid::DType compute) : compute_(compute) {
    fc1_ = register_module("fc1",
                           std::make_unique<braid::nn::Linear>(kFeatures, kHidden, true, 0.25f));
    for (int i = 0; i < kLayers; ++i)
      hidden_.push_back(
          register_module("fc" + std::to_string(i + 2),
                          std::make_unique<braid::nn::Linear>(kHidden, kHidden, true, 0.12f)));
    out_ = register_module("out",
                           std::make_unique<braid::nn::Linear>(kHidden, kClasses, false, 0.12f));
    std::vector<braid::nn::UnitDecl> units = {{"fc1", {fc1_}}};
    for (int i = 0; i < kLayers; ++i) units.push_back({"fc" + std::to_string(i + 2), {hidden_[i]}});
    units.push_back({"out", {out_}});
    declare_units(units);
  }

  int64_t num_layers() const override { return kLayers; }
  Variable embed(const Tensor& x) override {
    Variable in = braid::autograd::cast(Variable(x), compute_);  // bf16 / fp16 runs
    return braid::autograd::gelu((*fc1_)(in));
  }
  Variable run_layers(Variable h, int64_t begin, int64_t end) override {
    for (int64_t i = begin; i < end; ++i) h = braid::autograd::gelu((*hidden_[i])(h));
    return h;
  }
  // Cross-entropy of the activation against labels[B] (i32), summed and divided by
  // `denominator` (0: the mean over the micro-batch).
  Variable head_loss(const Variable& h, const Tensor& labels, double denominator) override {
    out_->enter_forward();  // the output layer's hooks (a sharded strategy gathers it)
    return out_->exit_forward(
        braid::autograd::lm_head_cross_entropy(h, out_->weight(), labels, denominator));
  }
  // Logits [B, kClasses], without recording (a model held whole by this process).
  Tensor logits(const Tensor& x) {
    braid::autograd::NoGradGuard no_grad;
    Variable h = run_layers(embed(x), 0, kLayers);
    return braid::autograd::cast((*out_)(h), braid::DType::f32).value();
  }

 private:
  braid::nn::Linear* fc1_;
  std::vector<braid::nn::Linear*> hidden_;
  braid::nn::Linear* out_;
  braid::DType compute_;
};

// Sample i: a class, and features around that class's centre (test samples follow the train
// ones in the same streams).
void make_sample(int64_t i, float* x, int32_t* label) {
  braid::Rng rng = braid::Rng(2024).fork(static_cast<uint64_t>(i));
  const auto c = static_cast<int32_t>(i % kClasses);
  braid::Rng centre = braid::Rng(99).fork(static_cast<uint64_t>(c));
  for (int64_t k = 0; k < kFeatures; ++k) x[k] = centre.normal() + 1.2f * rng.normal();
  *label = c;
}

std::pair<Tensor, Tensor> make_batch(const std::vector<int64_t>& indices) {
  const auto n = static_cast<int64_t>(indices.size());
  Tensor x = Tensor::empty(Shape{n, kFeatures});
  Tensor y = Tensor::empty(Shape{n}, braid::DType::i32);
  for (int64_t r = 0; r < n; ++r)
    make_sample(indices[static_cast<size_t>(r)], x.data<float>() + r * kFeatures,
                y.data<int32_t>() + r);
  return {x, y};
}

// FNV-1a over the bytes of the whole model's parameters.
uint64_t weights_hash(const Tensor& params) {
  uint64_t h = 1469598103934665603ull;
  const auto* p = static_cast<const unsigned char*>(params.raw_data());
  for (int64_t i = 0; i < params.numel() * 4; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

int run(int argc, char** argv) {
  braid::train::RunConfigSources sources;
  std::string save, resume;
  int64_t steps = -1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error(a + " needs a value");
      return argv[++i];
    };
    if (a == "--deepspeed")
      sources.deepspeed = value();
    else if (a == "--accelerate-config")
      sources.accelerate = value();
    else if (a == "--set")
      sources.overrides.push_back(value());
    else if (a == "--steps")
      steps = std::stoll(value());
    else if (a == "--save")
      save = value();
    else if (a == "--resume")
      resume = value();
    else if (!a.empty() && a[0] != '-' && sources.yaml.empty())
      sources.yaml = a;
    else
      throw std::runtime_error("unknown argument '" + a + "'");
  }
  if (sources.yaml.empty()) throw std::runtime_error("usage: train_mlp CONFIG.yaml [...]");

  braid::train::Accelerator acc(braid::train::load_run_config(sources));
  const braid::config::TrainConfig& cfg = acc.config();
  Mlp model(acc.compute_dtype());
  acc.prepare(model);
  acc.prepare_optimizer();
  int64_t first_step = 0;
  if (!resume.empty()) {
    acc.load_state(resume);
    first_step = acc.completed_steps();
  }
  acc.print(acc.describe() + " on " + std::to_string(acc.num_processes()) + " process(es), " +
            cfg.training.precision + "; " + std::to_string(model.layout().num_parameters()) +
            " parameters");

  // Micro-batch k of the run (k = step x accumulation + m) is the next `micro` samples of this
  // rank's share of epoch k / per_epoch: a resumed run reads on exactly where it stopped.
  const int64_t micro = cfg.training.micro_batch_size;
  const int64_t accum = cfg.training.gradient_accumulation_steps;
  braid::data::SamplerOptions so;
  so.seed = cfg.training.seed;
  so.drop_last = true;
  braid::data::DistributedSampler sampler = acc.prepare_sampler(kTrainSamples, so);
  const int64_t per_epoch = sampler.size() / micro;
  const int64_t last_step =
      steps >= 0 ? std::min(first_step + steps, cfg.training.max_steps) : cfg.training.max_steps;
  // This rank's micro-batch k of the run.
  auto micro_batch = [&](int64_t k) {
    sampler.set_epoch(k / per_epoch);
    std::vector<int64_t> idx;
    for (int64_t r = 0; r < micro; ++r) idx.push_back(sampler[(k % per_epoch) * micro + r]);
    return make_batch(idx);
  };
  for (int64_t step = first_step; step < last_step; ++step) {
    double loss = 0, norm = 0;
    if (acc.parallelism().is_pipelined()) {
      // A pipeline runs the forwards itself (its schedule): the whole step is train_step's.
      braid::parallel::MicroBatches batches;
      batches.count = accum;
      batches.next = [&](int64_t m) { return micro_batch(step * accum + m); };
      batches.denominator = static_cast<double>(cfg.training.global_batch_size);
      const auto r = acc.train_step(model, batches, step);
      loss = acc.reduce_mean(r.loss) * static_cast<double>(acc.dp_size());
      norm = r.grad_norm;
    } else {
      // The loop HuggingFace Accelerate users write.
      double loss_sum = 0;
      for (int64_t m = 0; m < accum; ++m) {
        auto [x, y] = micro_batch(step * accum + m);
        acc.accumulate();
        Variable l = model.loss(x, y, 0.0);
        loss_sum += l.value().item();
        acc.backward(l);
      }
      norm = acc.clip_grad_norm(cfg.optimizer.grad_clip);
      acc.step();
      loss = acc.reduce_mean(loss_sum / static_cast<double>(accum));
    }
    if (step == first_step || (step + 1) % 10 == 0 || step + 1 == last_step) {
      char line[160];
      std::snprintf(line, sizeof line, "step %lld | loss %.4f | grad norm %.3f | lr %.2e",
                    static_cast<long long>(step + 1), loss, norm, acc.learning_rate());
      acc.print(line);
    }
  }

  // Held-out accuracy on a local copy of the whole trained model (f32; whatever the layout held
  // of it, gathered): each rank scores its share, the counts are summed over ranks.
  const Tensor weights = acc.gather_parameters(model);
  Mlp whole(braid::DType::f32);
  whole.materialize(/*allocate_grads=*/false);
  whole.flat().params().copy_(weights);
  whole.flat().sync_compute();
  braid::data::SamplerOptions test;
  test.shuffle = false;
  braid::data::DistributedSampler held = acc.prepare_sampler(kTestSamples, test);
  std::vector<int64_t> idx;
  for (int64_t i = 0; i < held.size(); ++i) idx.push_back(kTrainSamples + held[i]);
  auto [x, y] = make_batch(idx);
  const Tensor logits = whole.logits(x);
  float correct = 0;
  for (int64_t r = 0; r < logits.size(0); ++r) {
    const float* row = logits.data<float>() + r * kClasses;
    int32_t best = 0;
    for (int32_t c = 1; c < kClasses; ++c) best = row[c] > row[best] ? c : best;
    correct += best == y.data<int32_t>()[r] ? 1.0f : 0.0f;
  }
  const std::vector<float> counts = acc.gather({correct, static_cast<float>(logits.size(0))});
  float right = 0, total = 0;
  for (size_t i = 0; i < counts.size(); i += 2) right += counts[i], total += counts[i + 1];
  char line[128];
  std::snprintf(line, sizeof line, "held-out accuracy %.3f (%d of %d)", right / total,
                static_cast<int>(right), static_cast<int>(total));
  acc.print(line);
  if (!save.empty()) {
    const auto r = acc.save_state(save);
    acc.print("saved " + r.dir.string());
  }
  const uint64_t hash = weights_hash(weights);
  std::snprintf(line, sizeof line, "weights fnv1a %016llx", static_cast<unsigned long long>(hash));
  acc.print(line);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_mlp: error: %s\n", e.what());
    return 1;
  }
}
