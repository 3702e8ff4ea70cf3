// The Accelerator on a model that is not a transformer (a classifier MLP declared here), on
// thread ranks: data parallel matches one process, ZeRO-3 matches DDP bit for bit at the same
// world size, accumulation matches one big micro-batch, save_state/load_state resume exactly and
// reshard (saved under DDP, loaded under ZeRO-3), and the helpers for metrics.
#include "braid/train/accelerator.h"

#include <gtest/gtest.h>

#include <cmath>
#include <mutex>

#include "braid/autograd/functions.h"
#include "braid/data/token_shard.h"
#include "braid/nn/linear.h"
#include "testing/train/strategy_parity_util.h"

namespace braid::train {
namespace {

constexpr int64_t kIn = 12, kHidden = 24, kClasses = 5, kSamples = 64;

// in -> hidden -> gelu -> hidden -> gelu -> classes; one unit per layer, so ZeRO-3 gathers them
// one at a time.
class Classifier : public nn::Model {
 public:
  // compute: the dtype a prepared model's parameters are in (Accelerator::compute_dtype()).
  explicit Classifier(DType compute = DType::f32) : compute_(compute) {
    l1_ = register_module("fc1", std::make_unique<nn::Linear>(kIn, kHidden, true, 0.3f));
    l2_ = register_module("fc2", std::make_unique<nn::Linear>(kHidden, kHidden, true, 0.2f));
    head_ = register_module("head", std::make_unique<nn::Linear>(kHidden, kClasses, false, 0.2f));
    declare_units({{"fc1", {l1_}}, {"fc2", {l2_}}, {"head", {head_}}});
  }
  // Mean cross-entropy of x[B, kIn] against labels[B].
  autograd::Variable loss(const Tensor& x, const Tensor& labels) {
    autograd::Variable h = autograd::gelu((*l1_)(autograd::cast(autograd::Variable(x), compute_)));
    h = autograd::gelu((*l2_)(h));
    head_->enter_forward();
    autograd::Variable l = autograd::lm_head_cross_entropy(h, head_->weight(), labels);
    return head_->exit_forward(l);
  }

 private:
  nn::Linear* l1_;
  nn::Linear* l2_;
  nn::Linear* head_;
  DType compute_;
};

// Sample i: x ~ N(0, 1) from its own stream, label = the argmax of a fixed projection.
void sample(int64_t i, float* x, int32_t* label) {
  Rng rng = Rng(7).fork(static_cast<uint64_t>(i));
  for (int64_t k = 0; k < kIn; ++k) x[k] = rng.normal();
  float best = -1e30f;
  for (int32_t c = 0; c < kClasses; ++c) {
    float v = 0;
    for (int64_t k = 0; k < kIn; ++k) v += x[k] * static_cast<float>(((c + 1) * (k + 3)) % 7 - 3);
    if (v > best) best = v, *label = c;
  }
}

std::pair<Tensor, Tensor> batch(const std::vector<int64_t>& indices) {
  const auto n = static_cast<int64_t>(indices.size());
  Tensor x = Tensor::empty(Shape{n, kIn});
  Tensor y = Tensor::empty(Shape{n}, DType::i32);
  for (int64_t r = 0; r < n; ++r)
    sample(indices[static_cast<size_t>(r)], x.data<float>() + r * kIn, y.data<int32_t>() + r);
  return {x, y};
}

config::TrainConfig config(const std::string& strategy, int64_t global, int64_t accum) {
  config::TrainConfig c;
  c.parallel.strategy = strategy;
  c.training.global_batch_size = global;
  c.training.gradient_accumulation_steps = accum;
  c.training.max_steps = 6;
  c.optimizer.lr = 0.05;
  c.optimizer.grad_clip = 0.5;
  c.schedule.warmup_steps = 2;
  c.memory.budget = "0";
  c.checkpoint.dir = "";
  return c;
}

// Runs `steps` optimizer steps of the loop the header shows from step `first` (of the sampler's
// epoch 0 order); returns the whole model's parameters afterwards.
Tensor train(Accelerator& acc, Classifier& model, int64_t first, int64_t steps) {
  const config::TrainConfig& c = acc.config();
  const int64_t micro = c.training.micro_batch_size, accum = c.training.gradient_accumulation_steps;
  data::SamplerOptions so;
  so.seed = 3;
  data::DistributedSampler sampler = acc.prepare_sampler(kSamples, so);
  sampler.set_epoch(0);
  for (int64_t s = first; s < first + steps; ++s) {
    for (int64_t m = 0; m < accum; ++m) {
      std::vector<int64_t> idx;
      for (int64_t r = 0; r < micro; ++r)
        idx.push_back(sampler[((s * accum + m) * micro + r) % sampler.size()]);
      auto [x, y] = batch(idx);
      const Accelerator::MicroStep ms = acc.accumulate();
      EXPECT_EQ(ms.index, m);
      acc.backward(model.loss(x, y));
      EXPECT_EQ(acc.sync_gradients(), m + 1 == accum);
    }
    acc.clip_grad_norm(c.optimizer.grad_clip);
    EXPECT_TRUE(acc.step());
  }
  return acc.gather_parameters(model);
}

// Parameters after `steps` steps on n thread ranks (rank 0's; every rank's must agree).
Tensor run(int n, const config::TrainConfig& c, int64_t steps = 4) {
  Tensor out;
  std::mutex mu;
  auto body = [&](std::shared_ptr<comm::ProcessGroup> world) {
    Accelerator acc(c, world);
    Classifier model(acc.compute_dtype());
    acc.prepare(model);
    acc.prepare_optimizer();
    Tensor p = train(acc, model, 0, steps);
    std::lock_guard lock(mu);
    if (!out.defined()) out = p;
    EXPECT_TRUE(braid::testing::bit_equal(out, p)) << "ranks disagree";
  };
  if (n == 1) {
    body(nullptr);
  } else {
    braid::testing::run_ranks(n, [&](comm::ProcessGroup& pg) { body(borrow(pg)); });
  }
  return out;
}

TEST(Accelerator, DataParallelMatchesOneProcess) {
  const Tensor one = run(1, config("none", 16, 1));
  const Tensor ddp = run(2, config("ddp", 16, 1));
  EXPECT_TRUE(braid::testing::all_close(one, ddp, 1e-5, 1e-6));
  EXPECT_FALSE(braid::testing::bit_equal(one, run(1, config("none", 16, 1), 2)))
      << "training should move the weights";
}

TEST(Accelerator, Zero3IsBitIdenticalToDdp) {
  const Tensor ddp = run(2, config("ddp", 16, 1));
  EXPECT_TRUE(braid::testing::bit_equal(ddp, run(2, config("zero3", 16, 1))));
  EXPECT_TRUE(braid::testing::bit_equal(ddp, run(2, config("zero2", 16, 1))));
}

TEST(Accelerator, MixedPrecisionStaysBitIdenticalAcrossStrategies) {
  for (const char* precision : {"bf16", "fp16"}) {
    config::TrainConfig ddp = config("ddp", 16, 1), zero3 = config("zero3", 16, 1);
    ddp.training.precision = zero3.training.precision = precision;
    const Tensor low = run(2, ddp);
    EXPECT_TRUE(braid::testing::bit_equal(low, run(2, zero3))) << precision;
    // Near the f32 run, but not it: the forward really ran in the low dtype.
    EXPECT_TRUE(braid::testing::all_close(low, run(2, config("ddp", 16, 1)), 0.05, 0.02))
        << precision;
    EXPECT_FALSE(braid::testing::bit_equal(low, run(2, config("ddp", 16, 1)))) << precision;
  }
}

TEST(Accelerator, SaveStateKeepsTheLossScale) {
  const auto root = private_temp_dir("braid_accelerator_fp16");
  config::TrainConfig c = config("zero2", 16, 1);
  c.training.precision = "fp16";
  c.fp16.initial_scale_power = 40;  // overflows at first: the scale backs off and is saved
  double saved = 0;
  braid::testing::run_ranks(2, [&](comm::ProcessGroup& pg) {
    Accelerator acc(c, borrow(pg));
    Classifier model(acc.compute_dtype());
    acc.prepare(model);
    acc.prepare_optimizer();
    for (int s = 0; s < 3; ++s) {
      auto [x, y] = batch({4 * pg.rank(), 4 * pg.rank() + 1, 4 * pg.rank() + 2, 4 * pg.rank() + 3});
      (void)acc.accumulate();
      acc.backward(model.loss(x, y));
      acc.clip_grad_norm(1.0);
      (void)acc.step();
    }
    EXPECT_LT(acc.loss_scaler()->scale(), std::ldexp(1.0, 40));
    acc.save_state(root);
    if (pg.rank() == 0) saved = acc.loss_scaler()->scale();
  });
  braid::testing::run_ranks(2, [&](comm::ProcessGroup& pg) {
    Accelerator acc(c, borrow(pg));
    Classifier model(acc.compute_dtype());
    acc.prepare(model);
    acc.prepare_optimizer();
    acc.load_state(root);
    EXPECT_EQ(acc.loss_scaler()->scale(), saved);
  });
}

TEST(Accelerator, AccumulationMatchesOneMicroBatch) {
  config::TrainConfig a = config("ddp", 16, 2);
  config::TrainConfig b = config("ddp", 16, 1);
  EXPECT_TRUE(braid::testing::all_close(run(2, a), run(2, b), 1e-5, 1e-6));
  // ZeRO-3 reduces every micro-step; DDP set to do the same is its bit-identical twin.
  config::TrainConfig z = config("zero3", 16, 2);
  a.parallel.sync_each_batch = "true";
  EXPECT_TRUE(braid::testing::bit_equal(run(2, a), run(2, z)));
}

TEST(Accelerator, SaveStateResumesExactlyAndReshards) {
  const auto root = private_temp_dir("braid_accelerator_state");
  const config::TrainConfig ddp = config("ddp", 16, 1);
  const Tensor straight = run(2, ddp, 4);
  braid::testing::run_ranks(2, [&](comm::ProcessGroup& pg) {
    Accelerator acc(ddp, borrow(pg));
    Classifier model;
    acc.prepare(model);
    acc.prepare_optimizer();
    train(acc, model, 0, 2);
    const checkpoint::SaveResult r = acc.save_state(root, {{"epoch", 1}});
    EXPECT_EQ(r.step, 2);
  });
  for (const char* strategy : {"ddp", "zero3"}) {
    braid::testing::run_ranks(2, [&](comm::ProcessGroup& pg) {
      Accelerator acc(config(strategy, 16, 1), borrow(pg));
      Classifier model;
      acc.prepare(model);
      acc.prepare_optimizer();
      const auto counters = acc.load_state(root);
      EXPECT_EQ(counters.at("epoch"), 1);
      EXPECT_EQ(acc.completed_steps(), 2);
      EXPECT_TRUE(braid::testing::bit_equal(straight, train(acc, model, 2, 2))) << strategy;
    });
  }
}

TEST(Accelerator, MetricsAndErrors) {
  braid::testing::run_ranks(2, [&](comm::ProcessGroup& pg) {
    Accelerator acc(config("ddp", 16, 2), borrow(pg));
    EXPECT_EQ(acc.dp_size(), 2);
    EXPECT_EQ(acc.config().training.micro_batch_size, 4);  // resolved: 16 / (2 x 2)
    const std::vector<float> all = acc.gather({static_cast<float>(pg.rank()), 5.0f});
    EXPECT_EQ(all, (std::vector<float>{0, 5, 1, 5}));
    EXPECT_DOUBLE_EQ(acc.reduce_mean(pg.rank() == 0 ? 1.0 : 3.0), 2.0);
    Classifier model;
    EXPECT_THROW(acc.prepare_optimizer(), Error);  // before prepare(model)
    acc.prepare(model);
    acc.prepare_optimizer();
    auto [x, y] = batch({0, 1, 2, 3});
    // Accumulating 2 micro-steps: a backward without accumulate() is refused, naming the fix.
    EXPECT_THROW(
        {
          try {
            acc.backward(model.loss(x, y));
          } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("call accumulate()"), std::string::npos);
            throw;
          }
        },
        Error);
    (void)acc.accumulate();
    acc.backward(model.loss(x, y));
    EXPECT_FALSE(acc.sync_gradients());
    EXPECT_THROW(acc.clip_grad_norm(1.0), Error);  // before the last micro-step
    EXPECT_FALSE(acc.step());                      // nothing to step yet
    EXPECT_EQ(acc.completed_steps(), 0);
  });
}

TEST(Accelerator, DataLoaderReadsTheDataParallelShare) {
  const auto dir = private_temp_dir("braid_accelerator_tokens");
  std::filesystem::create_directories(dir);
  std::vector<int32_t> ids(4096);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 7) % 100);
  data::write_token_shard((dir / "train_000000.bin").string(), ids, 100);
  config::TrainConfig c = config("zero3", 8, 1);  // 2 ranks x micro-batch 4
  c.parallel.tensor_parallel_size = 2;  // 4 ranks: dp 2 x tp 2; tp peers read the same data
  std::vector<std::vector<int32_t>> first(4);
  braid::testing::run_ranks(4, [&](comm::ProcessGroup& pg) {
    Accelerator acc(c, borrow(pg));
    data::DataLoaderOptions o;
    o.seq_len = 16;
    auto loader = acc.prepare_data_loader(dir.string(), "train", o);
    EXPECT_EQ(loader->options().world, 2);
    EXPECT_EQ(loader->options().batch_size, 4);
    const data::Batch b = loader->next();
    EXPECT_EQ(b.inputs.size(0), 4);
    first[static_cast<size_t>(pg.rank())].assign(b.inputs.data<int32_t>(),
                                                 b.inputs.data<int32_t>() + b.inputs.numel());
  });
  // Ranks are dp-major over tp (DeviceMesh): 0 and 1 share dp rank 0, 2 and 3 dp rank 1.
  EXPECT_EQ(first[0], first[1]);
  EXPECT_EQ(first[2], first[3]);
  EXPECT_NE(first[0], first[2]);
}

TEST(Accelerator, TensorParallelNeedsATransformer) {
  config::TrainConfig c = config("ddp", 8, 1);
  c.parallel.tensor_parallel_size = 2;
  braid::testing::run_ranks(2, [&](comm::ProcessGroup& pg) {
    Accelerator acc(c, borrow(pg));
    Classifier model;
    try {
      acc.prepare(model);
      ADD_FAILURE() << "prepare should refuse";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("tensor parallelism"), std::string::npos) << e.what();
    }
  });
}

}  // namespace
}  // namespace braid::train
