// The Accelerator pipelines a user's model (Note [Pipeline stage]): a classifier declared here as
// a sequence of units (an input layer, four hidden layers, a head: nn::StagedModel) trains
// through Accelerator::train_step under pp 2 (1f1b and gpipe), pp 4, dp 2 x pp 2 with ZeRO-3,
// and pp 2 with a head tied to the input layer, matching one process to fp32 tolerance; its
// checkpoint under pp 2 loads in one process; a layout the model cannot take is named.
#include <gtest/gtest.h>

#include <mutex>

#include "braid/autograd/functions.h"
#include "braid/nn/linear.h"
#include "braid/train/accelerator.h"
#include "testing/train/strategy_parity_util.h"

namespace braid::train {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kIn = 12, kWidth = 12, kClasses = 12, kLayers = 4, kSamples = 96;

// in -> width (gelu) -> 4 x [width -> width (gelu)] -> classes. Tied: the head is a final layer
// and then the input layer's weight as the classifier (kIn == kWidth == kClasses), as a tied LM
// head reads the token table.
class Sequential : public nn::StagedModel {
 public:
  explicit Sequential(bool tied = false) : tied_(tied) {
    in_ = register_module("input", std::make_unique<nn::Linear>(kIn, kWidth, true, 0.3f));
    auto* hidden = register_module("hidden", std::make_unique<nn::ModuleList<nn::Linear>>());
    for (int64_t i = 0; i < kLayers; ++i)
      layers_.push_back(hidden->append(std::make_unique<nn::Linear>(kWidth, kWidth, true, 0.3f)));
    head_ = register_module("head", std::make_unique<nn::Linear>(kWidth, kClasses, !tied_, 0.2f));
    std::vector<nn::UnitDecl> units = {{"input", {in_}}};
    if (tied_) units.front().borrowers.push_back(head_);
    for (int64_t i = 0; i < kLayers; ++i)
      units.push_back({"hidden." + std::to_string(i), {layers_[static_cast<size_t>(i)]}});
    units.push_back({"head", {head_}});
    declare_units(units);
  }

  int64_t num_layers() const override { return kLayers; }
  autograd::Variable embed(const Tensor& x) override {
    return autograd::gelu((*in_)(autograd::Variable(x)));
  }
  autograd::Variable run_layers(autograd::Variable x, int64_t begin, int64_t end) override {
    for (int64_t i = begin; i < end; ++i) x = autograd::gelu((*layers_[static_cast<size_t>(i)])(x));
    return x;
  }
  autograd::Variable head_loss(const autograd::Variable& x, const Tensor& labels,
                               double denominator) override {
    // Inside the head's hooks (a sharded strategy gathers it, and the unit it borrows from,
    // around everything that reads them, backward included).
    head_->enter_forward();
    if (!tied_)
      return head_->exit_forward(
          autograd::lm_head_cross_entropy(x, head_->weight(), labels, denominator));
    // A final layer, then the input layer's weight as the classifier.
    const autograd::Variable y = autograd::gelu(autograd::linear(x, head_->weight(), {}));
    return head_->exit_forward(
        autograd::lm_head_cross_entropy(y, in_->weight(), labels, denominator));
  }
  std::vector<std::string> tied_parameters() const override {
    if (!tied_) return {};
    return {"input.weight"};
  }

 protected:
  // The last stage's replica of the input layer: the head reads its weight, not its bias.
  void freeze_replica_extras() override {
    if (in_->bias_param()) in_->bias_param()->requires_grad = false;
  }

 private:
  bool tied_;
  nn::Linear* in_;
  std::vector<nn::Linear*> layers_;
  nn::Linear* head_;
};

void sample(int64_t i, float* x, int32_t* label) {
  Rng rng = Rng(11).fork(static_cast<uint64_t>(i));
  for (int64_t k = 0; k < kIn; ++k) x[k] = rng.normal();
  *label = static_cast<int32_t>(i % kClasses);
  x[*label] += 2.0f;
}

config::TrainConfig config(const std::string& strategy, int pp, const std::string& schedule) {
  config::TrainConfig c;
  c.parallel.strategy = strategy;
  c.parallel.pipeline_parallel_size = pp;
  c.parallel.pipeline_schedule = schedule;
  c.parallel.sync_each_batch = "false";
  c.training.global_batch_size = 8;
  c.training.micro_batch_size = 2;
  c.training.gradient_accumulation_steps = 0;  // derived: 4 micro-batches over dp
  c.training.max_steps = 5;
  c.optimizer.lr = 0.05;
  c.optimizer.grad_clip = 0.5;
  c.schedule.warmup_steps = 2;
  c.memory.budget = "0";
  c.checkpoint.dir = "";
  return c;
}

// Steps [first, first + steps) of train_step over this rank's share; the whole model's weights.
Tensor train(Accelerator& acc, Sequential& model, int64_t first, int64_t steps) {
  const config::TrainConfig& c = acc.config();
  const int64_t micro = c.training.micro_batch_size, accum = c.training.gradient_accumulation_steps;
  data::SamplerOptions so;
  so.seed = 5;
  data::DistributedSampler sampler = acc.prepare_sampler(kSamples, so);
  sampler.set_epoch(0);
  for (int64_t s = first; s < first + steps; ++s) {
    parallel::MicroBatches batches;
    batches.count = accum;
    batches.denominator = static_cast<double>(c.training.global_batch_size);
    batches.next = [&](int64_t m) {
      Tensor x = Tensor::empty(Shape{micro, kIn});
      Tensor y = Tensor::empty(Shape{micro}, DType::i32);
      for (int64_t r = 0; r < micro; ++r)
        sample(sampler[((s * accum + m) * micro + r) % sampler.size()], x.data<float>() + r * kIn,
               y.data<int32_t>() + r);
      return std::pair{x, y};
    };
    const Accelerator::StepResult r = acc.train_step(model, batches, s);
    EXPECT_TRUE(r.updated);
    EXPECT_TRUE(std::isfinite(r.loss));
  }
  return acc.gather_parameters(model);
}

Tensor run(int n, const config::TrainConfig& c, bool tied = false, const std::string& save = "",
           const std::string& load = "") {
  std::vector<Tensor> out(static_cast<size_t>(n));
  std::mutex mu;
  braid::testing::run_ranks(n, [&](comm::ProcessGroup& pg) {
    Accelerator acc(c, borrow(pg));
    Sequential model(tied);
    acc.prepare(model);
    acc.prepare_optimizer();
    int64_t first = 0;
    if (!load.empty()) {
      acc.load_state(load);
      first = acc.completed_steps();
    }
    Tensor w = train(acc, model, first, c.training.max_steps - first);
    if (!save.empty()) acc.save_state(save);
    std::lock_guard<std::mutex> lock(mu);
    out[static_cast<size_t>(pg.rank())] = w;
  });
  for (int r = 1; r < n; ++r)
    EXPECT_TRUE(braid::testing::bit_equal(out[static_cast<size_t>(r)], out[0])) << "rank " << r;
  return out[0];
}

TEST(AcceleratorPipeline, AUsersSequentialModelMatchesOneProcess) {
  for (bool tied : {false, true}) {
    SCOPED_TRACE(tied ? "tied head" : "own head");
    const Tensor one = run(1, config("none", 1, "1f1b"), tied);
    struct Case {
      int ranks, pp;
      const char* strategy;
      const char* schedule;
    };
    for (const Case& k : {Case{2, 2, "none", "1f1b"}, Case{2, 2, "none", "gpipe"},
                          Case{4, 4, "none", "1f1b"}, Case{4, 2, "zero3", "1f1b"}}) {
      SCOPED_TRACE(std::string(k.strategy) + " pp" + std::to_string(k.pp) + " " + k.schedule +
                   " on " + std::to_string(k.ranks));
      const Tensor w = run(k.ranks, config(k.strategy, k.pp, k.schedule), tied);
      EXPECT_TRUE(braid::testing::all_close(w, one, 1e-5, 1e-7));
    }
  }
}

// Saved under pp 2 after 3 steps, loaded by one process: the next steps match the straight run.
TEST(AcceleratorPipeline, ItsCheckpointLoadsInOneProcess) {
  const fs::path dir = private_temp_dir("braid_acc_pipeline") / "state";
  const Tensor straight = run(1, config("none", 1, "1f1b"));
  config::TrainConfig three = config("none", 2, "1f1b");
  three.training.max_steps = 3;
  run(2, three, false, dir.string());
  const Tensor resumed = run(1, config("none", 1, "1f1b"), false, "", dir.string());
  EXPECT_TRUE(braid::testing::all_close(resumed, straight, 1e-5, 1e-7));
}

TEST(AcceleratorPipeline, ALayoutTheModelCannotTakeIsNamed) {
  // 4 layers do not split into 3 uniform stages.
  auto errors = braid::testing::run_ranks_collect(3, [&](comm::ProcessGroup& pg) {
    Accelerator acc(config("none", 3, "1f1b"), borrow(pg));
    Sequential model;
    acc.prepare(model);
  });
  for (auto& e : errors)
    EXPECT_NE(braid::testing::what(e).find("parallel.pipeline_parallel_size"), std::string::npos)
        << braid::testing::what(e);
  // The caller's own forward cannot run a pipeline's micro-steps.
  errors = braid::testing::run_ranks_collect(2, [&](comm::ProcessGroup& pg) {
    Accelerator acc(config("none", 2, "1f1b"), borrow(pg));
    Sequential model;
    acc.prepare(model);
    acc.accumulate();
  });
  for (auto& e : errors)
    EXPECT_NE(braid::testing::what(e).find("use train_step()"), std::string::npos)
        << braid::testing::what(e);
}

}  // namespace
}  // namespace braid::train
