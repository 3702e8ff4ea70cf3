// Pipeline parallelism against one process at the level of one step: for every schedule, pp 2
// and 4 (v = 2 for interleaved), GPT-2 (tied embeddings: the first and last stage's copies) and
// LLaMA, the step's summed loss and every parameter's gradient on the stage that holds it equal
// one process's summed over the same micro-batches (fp32 tolerance: the same ops in the same
// order, so in practice bit for bit); and tensor parallelism inside the stages (tp2 x pp2).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <ostream>
#include <string>

#include "braid/autograd/variable.h"
#include "braid/core/memory_tracker.h"
#include "braid/nn/transformer.h"
#include "braid/parallel/parallelize.h"
#include "testing/run_ranks.h"
#include "testing/tensor_compare.h"

namespace braid::parallel {
namespace {

struct Case {
  std::string name;
  std::string preset;
  int layers;
  int pp;
  std::string schedule;
  int chunks;
  int micro;  // micro-batches
  int tp = 1;
  bool sp = false;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.name;
}

nn::ModelConfig config(const Case& c) {
  nn::ModelConfig cfg = nn::ModelConfig::preset(c.preset);
  cfg.n_layer = c.layers;
  return cfg;
}

std::vector<std::pair<Tensor, Tensor>> batches(const nn::ModelConfig& cfg, int micro) {
  const int64_t B = 2, T = 8;
  Rng rng(5);
  std::vector<std::pair<Tensor, Tensor>> out;
  for (int m = 0; m < micro; ++m) {
    Tensor ids = Tensor::empty(Shape{B, T}, DType::i32);
    Tensor targets = Tensor::empty(Shape{B, T}, DType::i32);
    for (int64_t i = 0; i < B * T; ++i) {
      const auto v = static_cast<uint64_t>(cfg.vocab_size);
      ids.data<int32_t>()[i] = static_cast<int32_t>(rng.next_u64() % v);
      targets.data<int32_t>()[i] = static_cast<int32_t>(rng.next_u64() % v);
    }
    out.emplace_back(ids, targets);
  }
  return out;
}

constexpr uint64_t kSeed = 3;

struct Reference {
  double loss = 0;
  std::map<std::string, Tensor> grads;
};

Reference reference(const nn::ModelConfig& cfg, const std::vector<std::pair<Tensor, Tensor>>& b,
                    double denominator) {
  nn::TransformerOptions o;
  o.seed = kSeed;
  nn::Transformer m(cfg, o);
  m.zero_grad();
  Reference r;
  for (const auto& [ids, targets] : b) {
    autograd::Variable loss = m.loss(ids, targets, denominator);
    r.loss += loss.value().item();
    loss.backward();
  }
  for (auto& [name, v] : m.named_parameters()) r.grads[name] = v.grad().clone();
  return r;
}

// A pipeline over pg with this rank's stage of cfg materialised from kSeed.
struct Stage {
  std::unique_ptr<Parallelism> parallelism;
  std::unique_ptr<nn::Transformer> model;
};

Stage build(const Case& c, const nn::ModelConfig& cfg, comm::ProcessGroup& pg) {
  ParallelPlan spec;
  spec.name = "none";
  spec.pipeline_parallel_size = c.pp;
  spec.pipeline_schedule = c.schedule;
  spec.pipeline_virtual_stages = c.chunks;
  spec.tensor_parallel_size = c.tp;
  spec.sequence_parallel = c.sp;
  Stage s;
  s.parallelism = parallelize(spec, std::shared_ptr<comm::ProcessGroup>(&pg, [](auto*) {}));
  nn::TransformerOptions to;
  to.materialize = false;
  to.tensor_parallel = s.parallelism->tensor_parallel();
  s.model = std::make_unique<nn::Transformer>(cfg, to);
  MaterializeOptions mo;
  nn::Transformer* model = s.model.get();
  mo.fill = [model](int u, Tensor& t) {
    model->full_layout().init_unit(model->global_unit(u), t, kSeed);
  };
  s.parallelism->materialize(*model, mo);
  return s;
}

MicroBatches micro_batches(const std::vector<std::pair<Tensor, Tensor>>& data) {
  MicroBatches mb;
  mb.count = static_cast<int64_t>(data.size());
  mb.next = [&data](int64_t m) { return data[static_cast<size_t>(m)]; };
  mb.denominator = static_cast<double>(mb.count * data[0].first.numel());
  return mb;
}

class PipelineModel : public ::testing::TestWithParam<Case> {};

TEST_P(PipelineModel, LossAndEveryGradientMatchOneProcess) {
  const Case c = GetParam();
  const nn::ModelConfig cfg = config(c);
  const auto data = batches(cfg, c.micro);
  const Reference ref = reference(cfg, data, static_cast<double>(c.micro * data[0].first.numel()));
  testing::run_ranks(c.pp * c.tp, [&](comm::ProcessGroup& pg) {
    Stage stage = build(c, cfg, pg);
    Parallelism* strategy = stage.parallelism.get();
    nn::Transformer& model = *stage.model;
    strategy->zero_grad();
    const StepLoss loss = strategy->forward_backward(model, micro_batches(data));
    EXPECT_TRUE(loss.finite);
    EXPECT_NEAR(loss.sum, ref.loss, 1e-5 * std::abs(ref.loss)) << "rank " << pg.rank();
    int compared = 0;
    for (const optim::ParamSlice& s : strategy->optimizer_slices()) {
      if (!s.grad.defined()) continue;  // frozen (the last stage's copy of wpe)
      const nn::ParamInfo& p = model.layout().param(s.name());
      if (p.param->tp.is_split()) continue;  // tp slices: tensor_parallel_test compares them
      EXPECT_TRUE(testing::all_close(s.grad, ref.grads.at(s.name()), 1e-4, 1e-7))
          << s.name() << " on rank " << pg.rank();
      ++compared;
    }
    EXPECT_GT(compared, 0) << "rank " << pg.rank();
  });
}

INSTANTIATE_TEST_SUITE_P(
    Schedules, PipelineModel,
    ::testing::Values(Case{"gpt2_pp2_gpipe", "gpt2-tiny", 4, 2, "gpipe", 1, 4},
                      Case{"gpt2_pp2_1f1b", "gpt2-tiny", 4, 2, "1f1b", 1, 4},
                      Case{"gpt2_pp2_1f1b_m1", "gpt2-tiny", 4, 2, "1f1b", 1, 1},
                      Case{"gpt2_pp2_interleaved", "gpt2-tiny", 4, 2, "interleaved_1f1b", 2, 4},
                      Case{"gpt2_pp4_gpipe", "gpt2-tiny", 4, 4, "gpipe", 1, 4},
                      Case{"gpt2_pp4_1f1b", "gpt2-tiny", 4, 4, "1f1b", 1, 6},
                      Case{"gpt2_pp4_interleaved", "gpt2-tiny", 8, 4, "interleaved_1f1b", 2, 8},
                      Case{"llama_pp2_1f1b", "llama-tiny", 4, 2, "1f1b", 1, 4},
                      Case{"llama_pp4_interleaved", "llama-tiny", 8, 4, "interleaved_1f1b", 2, 4},
                      Case{"gpt2_tp2_pp2_sp", "gpt2-tiny", 4, 2, "1f1b", 1, 4, 2, true},
                      Case{"gpt2_pp2_zb_h1", "gpt2-tiny", 4, 2, "zb_h1", 1, 4},
                      Case{"gpt2_pp2_zb_h1_m1", "gpt2-tiny", 4, 2, "zb_h1", 1, 1},
                      Case{"gpt2_pp4_zb_h1", "gpt2-tiny", 4, 4, "zb_h1", 1, 6},
                      Case{"llama_pp2_zb_h1", "llama-tiny", 4, 2, "zb_h1", 1, 4},
                      Case{"gpt2_tp2_pp2_sp_zb_h1", "gpt2-tiny", 4, 2, "zb_h1", 1, 4, 2, true},
                      // zb_v: two chunks a rank in a V (virtual stages 1 means 2 there).
                      Case{"gpt2_pp2_zb_v", "gpt2-tiny", 4, 2, "zb_v", 1, 4},
                      Case{"gpt2_pp2_zb_v_m1", "gpt2-tiny", 4, 2, "zb_v", 2, 1},
                      Case{"gpt2_pp4_zb_v", "gpt2-tiny", 8, 4, "zb_v", 2, 7},
                      Case{"llama_pp2_zb_v", "llama-tiny", 4, 2, "zb_v", 1, 5},
                      Case{"gpt2_tp2_pp2_sp_zb_v", "gpt2-tiny", 4, 2, "zb_v", 1, 4, 2, true}),
    [](const ::testing::TestParamInfo<Case>& i) { return i.param.name; });

// Note [Pipeline memory]: what a forward keeps lives until its backward, so the first stage's
// peak activation memory grows with the micro-batches under gpipe and stays at p in flight
// under 1f1b (tracker numbers).
// Per stage, the tracker's peak activation memory of one step of `schedule` over `micro`
// micro-batches on 2 stages.
std::vector<int64_t> stage_peaks(const std::string& schedule, int micro) {
  const Case c{"memory", "gpt2-tiny", 4, 2, schedule, 1, micro};
  const nn::ModelConfig cfg = config(c);
  const auto data = batches(cfg, micro);
  std::vector<int64_t> out(2);
  testing::run_ranks(2, [&](comm::ProcessGroup& pg) {
    Stage stage = build(c, cfg, pg);
    auto tracker = std::make_shared<MemoryTracker>("stage");
    MemoryScope scope(tracker);
    stage.parallelism->zero_grad();
    stage.parallelism->forward_backward(*stage.model, micro_batches(data));
    out[static_cast<size_t>(pg.rank())] = tracker->peak(MemCategory::activations);
  });
  return out;
}

// zb_h1 holds a micro-batch from its F to its W (Note [ZB-H1 bubble]): bounded by the stages,
// not the micro-batches, and no more than 1f1b's first stage holds (10% for the weight passes'
// output gradients, kept from B to W where 1f1b frees them at once).
TEST(PipelineMemory, ZbH1IsBoundedByStagesAsOneFOneB) {
  const std::vector<int64_t> z2 = stage_peaks("zb_h1", 2), z8 = stage_peaks("zb_h1", 8);
  const std::vector<int64_t> f8 = stage_peaks("1f1b", 8);
  const auto most = [](const std::vector<int64_t>& v) {
    return static_cast<double>(*std::max_element(v.begin(), v.end()));
  };
  EXPECT_LE(most(z8), 1.1 * most(z2)) << most(z2) << " -> " << most(z8);
  EXPECT_LE(most(z8), 1.1 * most(f8)) << most(z8) << " vs 1f1b " << most(f8);
  std::printf("peak activations (bytes) on stages 0, 1 at m=8: 1f1b %lld, %lld; zb_h1 %lld, %lld\n",
              static_cast<long long>(f8[0]), static_cast<long long>(f8[1]),
              static_cast<long long>(z8[0]), static_cast<long long>(z8[1]));
}

// zb_v holds at most 2p chunk micro-batches, each half a stage's layers, and that many from
// m = 2p - 1 on (Note [ZB-V]): bounded by the stages, on each stage no more than 1f1b's first
// stage holds (10% as zb_h1's).
TEST(PipelineMemory, ZbVIsBoundedByStagesAsOneFOneB) {
  const std::vector<int64_t> z4 = stage_peaks("zb_v", 4), z8 = stage_peaks("zb_v", 8);
  const std::vector<int64_t> f8 = stage_peaks("1f1b", 8);
  for (size_t r = 0; r < 2; ++r) {
    EXPECT_LE(static_cast<double>(z8[r]), 1.1 * static_cast<double>(z4[r])) << "stage " << r;
    EXPECT_LE(static_cast<double>(z8[r]), 1.1 * static_cast<double>(f8[0])) << "stage " << r;
  }
  std::printf("peak activations (bytes) on stages 0, 1 at m=8: 1f1b %lld, %lld; zb_v %lld, %lld\n",
              static_cast<long long>(f8[0]), static_cast<long long>(f8[1]),
              static_cast<long long>(z8[0]), static_cast<long long>(z8[1]));
}

TEST(PipelineMemory, GpipeGrowsWithMicroBatchesOneFOneBIsBoundedByStages) {
  // The first stage: p = 2 micro-batches in flight under 1f1b.
  auto peak = [](const std::string& schedule, int micro) {
    return stage_peaks(schedule, micro)[0];
  };
  const int64_t g2 = peak("gpipe", 2), g8 = peak("gpipe", 8);
  const int64_t f2 = peak("1f1b", 2), f8 = peak("1f1b", 8);
  EXPECT_GT(static_cast<double>(g8), 3.0 * static_cast<double>(g2)) << g2 << " -> " << g8;
  EXPECT_LE(static_cast<double>(f8), 1.1 * static_cast<double>(f2)) << f2 << " -> " << f8;
  EXPECT_LT(static_cast<double>(f8), 0.5 * static_cast<double>(g8)) << f8 << " vs " << g8;
  std::printf(
      "stage 0 peak activations (bytes): gpipe m=2 %lld, m=8 %lld; 1f1b m=2 %lld, m=8 "
      "%lld\n",
      static_cast<long long>(g2), static_cast<long long>(g8), static_cast<long long>(f2),
      static_cast<long long>(f8));
}

}  // namespace
}  // namespace braid::parallel
