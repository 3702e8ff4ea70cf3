#include "braid/optim/lr_schedule.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "braid/core/error.h"

namespace braid::optim {
namespace {

TEST(LrSchedule, ConstantWithWarmup) {
  LrSchedule s{LrDecay::constant, 3e-4, 10, 0, 0};
  s.validate();
  EXPECT_DOUBLE_EQ(s.lr_at(0), 0.0);  // HF: the first step runs at lr 0 with warmup
  EXPECT_DOUBLE_EQ(s.lr_at(5), 1.5e-4);
  EXPECT_DOUBLE_EQ(s.lr_at(10), 3e-4);
  EXPECT_DOUBLE_EQ(s.lr_at(100000), 3e-4);
  EXPECT_DOUBLE_EQ((LrSchedule{LrDecay::constant, 1.0, 0, 0, 0}.lr_at(0)), 1.0);
}

TEST(LrSchedule, LinearMatchesHf) {
  LrSchedule s{LrDecay::linear, 1.0, 10, 110, 0};
  EXPECT_DOUBLE_EQ(s.lr_at(4), 0.4);
  EXPECT_DOUBLE_EQ(s.lr_at(10), 1.0);
  EXPECT_DOUBLE_EQ(s.lr_at(35), 0.75);
  EXPECT_DOUBLE_EQ(s.lr_at(60), 0.5);
  EXPECT_DOUBLE_EQ(s.lr_at(110), 0.0);
  EXPECT_DOUBLE_EQ(s.lr_at(500), 0.0);
  s.min_lr = 0.1;
  EXPECT_DOUBLE_EQ(s.lr_at(60), 0.55);
  EXPECT_DOUBLE_EQ(s.lr_at(500), 0.1);
}

TEST(LrSchedule, CosineMatchesHf) {
  LrSchedule s{LrDecay::cosine, 2.0, 10, 110, 0};
  EXPECT_DOUBLE_EQ(s.lr_at(0), 0.0);
  EXPECT_DOUBLE_EQ(s.lr_at(10), 2.0);
  EXPECT_NEAR(s.lr_at(35), 2.0 * 0.5 * (1 + std::cos(std::numbers::pi / 4)), 1e-12);
  EXPECT_NEAR(s.lr_at(60), 1.0, 1e-12);
  EXPECT_NEAR(s.lr_at(110), 0.0, 1e-12);
  EXPECT_NEAR(s.lr_at(200), 0.0, 1e-12);  // clamped, never rises again
  s.min_lr = 0.2;                         // min_lr_rate 0.1
  EXPECT_NEAR(s.lr_at(60), 2.0 * (0.1 + 0.9 * 0.5), 1e-12);
  EXPECT_NEAR(s.lr_at(110), 0.2, 1e-12);
}

TEST(LrSchedule, ValidationNamesTheField) {
  LrSchedule bad{LrDecay::cosine, 1.0, 100, 50, 0};
  try {
    bad.validate();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("total_steps (50)"), std::string::npos) << e.what();
  }
  EXPECT_THROW((LrSchedule{LrDecay::linear, 1.0, 0, 10, 2.0}.validate()), Error);
  EXPECT_EQ(lr_decay_from_name("cosine"), LrDecay::cosine);
  EXPECT_THROW(lr_decay_from_name("cosin"), Error);
}

TEST(LrSchedule, LogWarmupAsDeepSpeed) {
  // DeepSpeed's WarmupLR, warmup_type log: lr x ln(step + 1) / ln(warmup_num_steps).
  LrSchedule s{LrDecay::constant, 2.0, 10, 0, 0.0};
  s.log_warmup = true;
  EXPECT_DOUBLE_EQ(s.lr_at(0), 0.0);
  EXPECT_DOUBLE_EQ(s.lr_at(4), 2.0 * std::log(5.0) / std::log(10.0));
  EXPECT_DOUBLE_EQ(s.lr_at(9), 2.0);  // ln 10 / ln 10
  EXPECT_DOUBLE_EQ(s.lr_at(10), 2.0);
}

}  // namespace
}  // namespace braid::optim
