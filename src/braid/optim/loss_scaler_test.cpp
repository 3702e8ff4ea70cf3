#include "braid/optim/loss_scaler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace braid::optim {
namespace {

// Every table below was worked out by hand from DynamicLossScaler.update_scale in DeepSpeed's
// deepspeed/runtime/fp16/loss_scaler.py (Note [DeepSpeed's update rules] in loss_scaler.cpp).
// Row i is iteration i = cur_iter before the update; "w" in the comments is
// (cur_iter - last_overflow_iter) % loss_scale_window, which grows the scale when 0 on a clean
// step; last_overflow_iter starts at -1.
constexpr bool kOverflow = true, kClean = false;
constexpr bool kStep = true, kSkip = false;

struct Row {
  bool overflow;   // injected at this iteration
  bool is_taken;   // update()'s verdict: the optimizer step runs
  double scale;    // scale() after the update
  int hysteresis;  // state().cur_hysteresis after the update
};

struct Table {
  const char* rule;
  LossScalerConfig config;
  std::vector<Row> rows;
};

// Feeds rows[from..] to s and checks each.
void expect_rows(LossScaler& s, const Table& t, size_t from = 0) {
  for (size_t i = from; i < t.rows.size(); ++i) {
    const Row& r = t.rows[i];
    SCOPED_TRACE(std::string(t.rule) + ", iteration " + std::to_string(i));
    EXPECT_EQ(s.update(r.overflow), r.is_taken);
    EXPECT_EQ(s.scale(), r.scale);
    EXPECT_EQ(s.state().cur_hysteresis, r.hysteresis);
    EXPECT_EQ(s.state().cur_iter, static_cast<int64_t>(i + 1));
    EXPECT_EQ(s.overflow_message().empty(), !r.overflow);
  }
}

void expect_table(const Table& t) {
  LossScaler s(t.config);
  expect_rows(s, t);
}

// Plain backoff and growth (hysteresis 1): halve on every overflow; double at the 4th clean
// step counted from the last overflow, and every 4 steps after that (a modulo, not a reset).
const Table kBackoffAndGrowth{
    "backoff and growth, window 4",
    {.initial_scale_power = 4, .loss_scale_window = 4, .hysteresis = 1},
    {
        {kClean, kStep, 16, 1},     // 0: w = (0 - -1) % 4 = 1
        {kClean, kStep, 16, 1},     // 1: w = 2
        {kClean, kStep, 16, 1},     // 2: w = 3
        {kClean, kStep, 32, 1},     // 3: w = 0, grow
        {kClean, kStep, 32, 1},     // 4: w = 1
        {kOverflow, kSkip, 16, 1},  // 5: back off, last_overflow_iter = 5
        {kClean, kStep, 16, 1},     // 6: w = 1
        {kClean, kStep, 16, 1},     // 7: w = 2
        {kClean, kStep, 16, 1},     // 8: w = 3
        {kClean, kStep, 32, 1},     // 9: w = 0, grow
        {kClean, kStep, 32, 1},     // 10
        {kClean, kStep, 32, 1},     // 11
        {kClean, kStep, 32, 1},     // 12
        {kClean, kStep, 64, 1},     // 13: w = (13 - 5) % 4 = 0, grow again
        {kOverflow, kSkip, 32, 1},  // 14: back off
        {kOverflow, kSkip, 16, 1},  // 15: and again, last_overflow_iter = 15
        {kClean, kStep, 16, 1},     // 16: w = 1
        {kClean, kStep, 16, 1},     // 17
        {kClean, kStep, 16, 1},     // 18
        {kClean, kStep, 32, 1},     // 19: w = 0, grow
    }};

// Hysteresis 2: the first overflow only counts down; without consecutive_hysteresis only growth
// refills the countdown, so the next overflow backs off however many clean steps came between.
const Table kHysteresis2{
    "hysteresis 2",
    {.initial_scale_power = 4, .loss_scale_window = 4, .hysteresis = 2},
    {
        {kOverflow, kSkip, 16, 1},  // 0: countdown 2 -> 1, scale kept, last_overflow_iter = 0
        {kClean, kStep, 16, 1},     // 1: w = 1, countdown not refilled
        {kClean, kStep, 16, 1},     // 2: w = 2
        {kOverflow, kSkip, 8, 1},   // 3: countdown at 1: back off
        {kOverflow, kSkip, 4, 1},   // 4: back off, last_overflow_iter = 4
        {kClean, kStep, 4, 1},      // 5: w = 1
        {kClean, kStep, 4, 1},      // 6: w = 2
        {kClean, kStep, 4, 1},      // 7: w = 3
        {kClean, kStep, 8, 2},      // 8: w = 0, grow and refill
        {kOverflow, kSkip, 8, 1},   // 9: countdown 2 -> 1
        {kOverflow, kSkip, 4, 1},   // 10: back off
    }};

// Hysteresis 3: two overflows count down, the third backs off; growth refills to 3.
const Table kHysteresis3{"hysteresis 3",
                         {.initial_scale_power = 4, .loss_scale_window = 4, .hysteresis = 3},
                         {
                             {kOverflow, kSkip, 16, 2},  // 0: 3 -> 2
                             {kOverflow, kSkip, 16, 1},  // 1: 2 -> 1
                             {kOverflow, kSkip, 8, 1},   // 2: back off
                             {kOverflow, kSkip, 4, 1},   // 3: back off, last_overflow_iter = 3
                             {kClean, kStep, 4, 1},      // 4: w = 1
                             {kClean, kStep, 4, 1},      // 5: w = 2
                             {kClean, kStep, 4, 1},      // 6: w = 3
                             {kClean, kStep, 8, 3},      // 7: w = 0, grow and refill to 3
                             {kOverflow, kSkip, 8, 2},   // 8: 3 -> 2, last_overflow_iter = 8
                             {kClean, kStep, 8, 2},      // 9: w = 1
                             {kClean, kStep, 8, 2},      // 10: w = 2
                             {kClean, kStep, 8, 2},      // 11: w = 3
                             {kClean, kStep, 16, 3},     // 12: w = 0, grow and refill
                         }};

// consecutive_hysteresis false vs true on the same overflows with clean steps between (window
// 100: no growth). False: the clean steps do not refill, the 2nd overflow backs off. True:
// every clean step refills to 2, so only two overflows in a row back off.
const Table kConsecutiveFalse{"consecutive_hysteresis false",
                              {.initial_scale_power = 4, .loss_scale_window = 100, .hysteresis = 2},
                              {
                                  {kOverflow, kSkip, 16, 1},  // 0: 2 -> 1
                                  {kClean, kStep, 16, 1},     // 1: not refilled
                                  {kOverflow, kSkip, 8, 1},   // 2: back off
                                  {kClean, kStep, 8, 1},      // 3
                                  {kOverflow, kSkip, 4, 1},   // 4: back off
                                  {kOverflow, kSkip, 2, 1},   // 5: back off
                                  {kClean, kStep, 2, 1},      // 6
                              }};
const Table kConsecutiveTrue{"consecutive_hysteresis true",
                             {.initial_scale_power = 4,
                              .loss_scale_window = 100,
                              .hysteresis = 2,
                              .consecutive_hysteresis = true},
                             {
                                 {kOverflow, kSkip, 16, 1},  // 0: 2 -> 1
                                 {kClean, kStep, 16, 2},     // 1: refilled
                                 {kOverflow, kSkip, 16, 1},  // 2: 2 -> 1 again, no backoff
                                 {kClean, kStep, 16, 2},     // 3: refilled
                                 {kOverflow, kSkip, 16, 1},  // 4: 2 -> 1
                                 {kOverflow, kSkip, 8, 1},   // 5: two in a row: back off
                                 {kClean, kStep, 8, 2},      // 6: refilled
                             }};

// min_loss_scale floor: a backoff is max(scale / 2, min_loss_scale); growth from the floor need
// not give a power of two. (One more overflow at the floor is an error: see the test below.)
const Table kMinLossScaleFloor{
    "min_loss_scale 5",
    {.initial_scale_power = 4, .loss_scale_window = 2, .hysteresis = 1, .min_loss_scale = 5},
    {
        {kOverflow, kSkip, 8, 1},  // 0: max(8, 5)
        {kOverflow, kSkip, 5, 1},  // 1: max(4, 5): the floor, last_overflow_iter = 1
        {kClean, kStep, 5, 1},     // 2: w = 1
        {kClean, kStep, 10, 1},    // 3: w = 0, grow from the floor
        {kOverflow, kSkip, 5, 1},  // 4: max(5, 5)
    }};

// Growth right after an overflow: with window 1, w is always 0, so the clean step right after
// an overflow already doubles back (DeepSpeed's FP16_Optimizer would wait one more step; its
// ZeRO path, whose rule this is, does not).
const Table kWindow1{"window 1",
                     {.initial_scale_power = 4, .loss_scale_window = 1, .hysteresis = 1},
                     {
                         {kClean, kStep, 32, 1},     // 0: w = 0, grow
                         {kOverflow, kSkip, 16, 1},  // 1: back off
                         {kClean, kStep, 32, 1},     // 2: right after the overflow: grow
                         {kOverflow, kSkip, 16, 1},  // 3
                         {kOverflow, kSkip, 8, 1},   // 4
                         {kClean, kStep, 16, 1},     // 5: grow
                     }};

// Growth after the window: an overflow at the iteration where the window would have closed
// restarts it from there, even one that only counts the hysteresis down and keeps the scale.
const Table kOverflowRestartsWindow{
    "overflow restarts the window",
    {.initial_scale_power = 4, .loss_scale_window = 4, .hysteresis = 2},
    {
        {kClean, kStep, 16, 2},     // 0: w = 1
        {kClean, kStep, 16, 2},     // 1: w = 2
        {kClean, kStep, 16, 2},     // 2: w = 3
        {kOverflow, kSkip, 16, 1},  // 3: would have grown; 2 -> 1, last_overflow_iter = 3
        {kClean, kStep, 16, 1},     // 4: w = 1
        {kClean, kStep, 16, 1},     // 5: w = 2
        {kClean, kStep, 16, 1},     // 6: w = 3
        {kClean, kStep, 32, 2},     // 7: w = 0, grow and refill
        {kClean, kStep, 32, 2},     // 8
        {kClean, kStep, 32, 2},     // 9
        {kClean, kStep, 32, 2},     // 10
        {kClean, kStep, 64, 2},     // 11: w = (11 - 3) % 4 = 0, grow
    }};

// Static scale: never moves, whatever the dynamic keys say, and an overflow still skips the
// step (ZeRO and FP16_Optimizer skip on overflow with a static scaler too). At min_loss_scale it
// is not an error: a static scale never backs off.
const Table kStatic{"static loss_scale 128",
                    {.loss_scale = 128, .loss_scale_window = 1, .hysteresis = 2},
                    {
                        {kClean, kStep, 128, 2},
                        {kOverflow, kSkip, 128, 2},
                        {kOverflow, kSkip, 128, 2},
                        {kOverflow, kSkip, 128, 2},
                        {kClean, kStep, 128, 2},
                    }};
const Table kStaticAtMin{"static loss_scale 1",
                         {.loss_scale = 1, .hysteresis = 1},
                         {
                             {kOverflow, kSkip, 1, 1},
                             {kOverflow, kSkip, 1, 1},
                             {kClean, kStep, 1, 1},
                         }};

const std::vector<const Table*> kAllTables = {
    &kBackoffAndGrowth, &kHysteresis2,       &kHysteresis3, &kConsecutiveFalse,
    &kConsecutiveTrue,  &kMinLossScaleFloor, &kWindow1,     &kOverflowRestartsWindow,
    &kStatic,           &kStaticAtMin};

TEST(LossScaler, DefaultsAreDeepSpeedsFp16Block) {
  LossScaler s;
  EXPECT_TRUE(s.is_dynamic());
  EXPECT_EQ(s.scale(), 65536);  // 2^16
  EXPECT_EQ(s.state(), (LossScaler::State{65536, 0, -1, 2, true}));
}

TEST(LossScaler, BackoffAndGrowthWindow4) {
  expect_table(kBackoffAndGrowth);
}
TEST(LossScaler, Hysteresis2) {
  expect_table(kHysteresis2);
}
TEST(LossScaler, Hysteresis3) {
  expect_table(kHysteresis3);
}
TEST(LossScaler, ConsecutiveHysteresisFalseVsTrue) {
  expect_table(kConsecutiveFalse);
  expect_table(kConsecutiveTrue);
}
TEST(LossScaler, MinLossScaleFloor) {
  expect_table(kMinLossScaleFloor);
}
TEST(LossScaler, GrowthRightAfterAnOverflowWithWindow1) {
  expect_table(kWindow1);
}
TEST(LossScaler, AnOverflowRestartsTheGrowthWindow) {
  expect_table(kOverflowRestartsWindow);
}
TEST(LossScaler, StaticScaleNeverMovesButOverflowSkips) {
  expect_table(kStatic);
  expect_table(kStaticAtMin);
}

TEST(LossScaler, OverflowAtTheFloorIsAnErrorThatChangesNothing) {
  LossScaler s(kMinLossScaleFloor.config);
  expect_rows(s, kMinLossScaleFloor);
  const LossScaler::State before = s.state();
  const std::string message = s.overflow_message();
  try {
    s.update(true);
    ADD_FAILURE() << "no error at the floor";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("iteration 5 with the loss scale already at "
                                         "min_loss_scale = 5"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(s.state(), before);
  EXPECT_EQ(s.overflow_message(), message);
  EXPECT_TRUE(s.update(false));  // and it goes on if the caller does

  // With hysteresis the countdown runs at the floor first; only the backoff is an error.
  LossScaler h({.initial_scale_power = 0, .hysteresis = 2});
  EXPECT_FALSE(h.update(true));
  EXPECT_EQ(h.scale(), 1);
  EXPECT_EQ(h.state().cur_hysteresis, 1);
  EXPECT_THROW(h.update(true), Error);
}

TEST(LossScaler, OverflowMessagesForTheTrainingLog) {
  LossScaler s({.hysteresis = 2});
  s.update(true);
  EXPECT_EQ(s.overflow_message(),
            "fp16 overflow: step skipped, loss scale 65536 kept, hysteresis 2 -> 1");
  s.update(true);
  EXPECT_EQ(s.overflow_message(), "fp16 overflow: step skipped, loss scale 65536 -> 32768");
  s.update(false);
  EXPECT_EQ(s.overflow_message(), "");
  LossScaler floor({.initial_scale_power = 4, .hysteresis = 1, .min_loss_scale = 5});
  floor.update(true);
  floor.update(true);
  EXPECT_EQ(floor.overflow_message(), "fp16 overflow: step skipped, loss scale 8 -> 5");
  LossScaler fixed({.loss_scale = 128});
  fixed.update(true);
  EXPECT_EQ(fixed.overflow_message(), "fp16 overflow: step skipped, static loss scale 128 kept");
}

// State round trip: stop any table at any iteration, restore its state into a fresh scaler
// (built from the same config, except a different initial_scale_power, which the state
// overrides) and the fresh one plays the rest of the table exactly.
TEST(LossScaler, StateRoundTripMidSequenceReproducesTheRestOfEveryTable) {
  for (const Table* t : kAllTables) {
    for (size_t k = 0; k <= t->rows.size(); ++k) {
      SCOPED_TRACE(std::string(t->rule) + ", restored after " + std::to_string(k) + " rows");
      LossScaler a(t->config);
      for (size_t i = 0; i < k; ++i) a.update(t->rows[i].overflow);
      LossScalerConfig other = t->config;
      other.initial_scale_power += 3;
      LossScaler b(other);
      b.set_state(a.state());
      EXPECT_EQ(b.state(), a.state());
      expect_rows(b, *t, k);
    }
  }
}

TEST(LossScaler, SetStateRejectsStatesTheConfigCannotReach) {
  const LossScalerConfig config{.initial_scale_power = 4, .hysteresis = 2, .min_loss_scale = 2};
  const LossScaler::State good{8, 10, 7, 1, true};
  LossScaler s(config);
  s.set_state(good);
  struct Bad {
    LossScaler::State state;
    const char* message;
  };
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<Bad> bad = {
      {{0, 10, 7, 1, true}, "cur_scale = 0, must be positive and finite"},
      {{inf, 10, 7, 1, true}, "cur_scale = inf, must be positive and finite"},
      {{1, 10, 7, 1, true}, "cur_scale = 1 is below fp16 config min_loss_scale = 2"},
      {{8, -1, -1, 1, true}, "cur_iter = -1, must be >= 0"},
      {{8, 10, 10, 1, true}, "last_overflow_iter = 10, must be in [-1, cur_iter = 10)"},
      {{8, 10, -2, 1, true}, "last_overflow_iter = -2, must be in [-1, cur_iter = 10)"},
      {{8, 10, 7, 0, true}, "cur_hysteresis = 0, must be in [1, fp16 config hysteresis = 2]"},
      {{8, 10, 7, 3, true}, "cur_hysteresis = 3, must be in [1, fp16 config hysteresis = 2]"},
      {{8, 10, 7, 1, false}, "saved with static scaling, but fp16 config loss_scale = 0"},
  };
  for (const Bad& b : bad) {
    try {
      s.set_state(b.state);
      ADD_FAILURE() << "accepted: " << b.message;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(b.message), std::string::npos) << e.what();
    }
    EXPECT_EQ(s.state(), good);  // a rejected state changes nothing
  }
  LossScaler fixed({.loss_scale = 128});
  EXPECT_THROW(fixed.set_state(good), Error);  // dynamic state, static config
  try {
    fixed.set_state({64, 3, -1, 2, false});
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("static cur_scale = 64, but fp16 config loss_scale = 128"),
              std::string::npos)
        << e.what();
  }
}

TEST(LossScaler, BadConfigValuesNameTheKeyAndValue) {
  const double inf = std::numeric_limits<double>::infinity();
  struct Bad {
    LossScalerConfig config;
    const char* message;
  };
  const std::vector<Bad> bad = {
      {{.loss_scale = -1}, "fp16 config: loss_scale = -1,"},
      {{.loss_scale = inf}, "fp16 config: loss_scale = inf,"},
      {{.loss_scale = std::nan("")}, "fp16 config: loss_scale = nan,"},
      {{.initial_scale_power = -1}, "fp16 config: initial_scale_power = -1, must be in [0, 126]"},
      {{.initial_scale_power = 127}, "fp16 config: initial_scale_power = 127, must be in [0, 126]"},
      {{.loss_scale_window = 0}, "fp16 config: loss_scale_window = 0, must be >= 1"},
      {{.loss_scale_window = -5}, "fp16 config: loss_scale_window = -5, must be >= 1"},
      {{.hysteresis = 0}, "fp16 config: hysteresis = 0, must be >= 1"},
      {{.min_loss_scale = 0}, "fp16 config: min_loss_scale = 0, must be positive and finite"},
      {{.min_loss_scale = -2}, "fp16 config: min_loss_scale = -2, must be positive and finite"},
      {{.min_loss_scale = inf}, "fp16 config: min_loss_scale = inf, must be positive and finite"},
      {{.initial_scale_power = 2, .min_loss_scale = 8},
       "fp16 config: min_loss_scale = 8 is above the initial scale 2^initial_scale_power = 4"},
  };
  for (const Bad& b : bad) {
    try {
      LossScaler s(b.config);
      ADD_FAILURE() << "accepted: " << b.message;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(b.message), std::string::npos) << e.what();
    }
  }
  // A static scale ignores the dynamic start, so it may sit below min_loss_scale's 2^power.
  EXPECT_NO_THROW(LossScaler({.loss_scale = 2, .initial_scale_power = 2, .min_loss_scale = 8}));
}

TEST(LossScaler, UnscaleDividesAndDetectsInfNan) {
  LossScaler s({.initial_scale_power = 2});
  Tensor g = Tensor::from_vector<float>({8, -4}, Shape{2});
  EXPECT_FALSE(s.unscale({g}));
  EXPECT_EQ(g.to_f32_vector(), (std::vector<float>{2, -1}));
  Tensor bad = Tensor::from_vector<float>({1, std::nanf("")}, Shape{2});
  EXPECT_TRUE(s.unscale({g, bad}));
  Tensor inf = Tensor::from_vector<float>({-std::numeric_limits<float>::infinity()}, Shape{1});
  EXPECT_TRUE(s.unscale({inf, Tensor()}));
  // Another rank found one: everyone agrees.
  Tensor ok = Tensor::from_vector<float>({1}, Shape{1});
  EXPECT_TRUE(s.unscale({ok}, [](double local) { return local + 1.0; }));
}

}  // namespace
}  // namespace braid::optim
