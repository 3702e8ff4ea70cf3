// The loss scaler across data-parallel ranks: the found-inf flag is all-reduced, so an overflow
// in one rank's gradients skips the step on every rank and every rank moves its scale the same.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "braid/comm/process_group.h"
#include "braid/optim/loss_scaler.h"
#include "testing/run_ranks.h"

namespace braid::parallel {
namespace {

using optim::LossScaler;

constexpr float kInf = std::numeric_limits<float>::infinity();

struct Step {
  bool overflow;  // injected into rank (iteration % ranks) only
  float bad;      // the value injected
  bool is_taken;  // expected verdict on every rank
  double scale;   // expected scale() after update() on every rank
};

// initial_scale_power 4, loss_scale_window 2, hysteresis 2; by DeepSpeed's update_scale (Note
// [DeepSpeed's update rules], optim/loss_scaler.cpp); w = (iteration - last_overflow_iter) % 2.
const std::vector<Step> kSteps = {
    {false, 0, true, 16},             // 0: w = 1
    {true, kInf, false, 16},          // 1: hysteresis 2 -> 1
    {true, std::nanf(""), false, 8},  // 2: back off
    {false, 0, true, 8},              // 3: w = 1
    {false, 0, true, 16},             // 4: w = 0, grow, hysteresis back to 2
    {false, 0, true, 16},             // 5: w = 1
    {true, -kInf, false, 16},         // 6: hysteresis 2 -> 1
    {false, 0, true, 16},             // 7: w = 1
    {false, 0, true, 32},             // 8: w = 0, grow
};

void check_ranks(int n) {
  SCOPED_TRACE(std::to_string(n) + " ranks");
  std::vector<LossScaler::State> final_state(n);
  std::vector<std::vector<std::string>> messages(n);
  braid::testing::run_ranks(n, [&](comm::ProcessGroup& pg) {
    const int rank = pg.rank();
    LossScaler scaler({.initial_scale_power = 4, .loss_scale_window = 2, .hysteresis = 2});
    for (size_t i = 0; i < kSteps.size(); ++i) {
      const Step& step = kSteps[i];
      SCOPED_TRACE("rank " + std::to_string(rank) + ", iteration " + std::to_string(i));
      const float s = static_cast<float>(scaler.scale());
      // Scaled gradients: rank-dependent, exact in f32 at these scales.
      Tensor a = Tensor::from_vector<float>({s * (rank + 1), -2 * s}, Shape{2});
      Tensor b = Tensor::from_vector<float>({3 * s}, Shape{1});
      const bool is_bad_rank = step.overflow && static_cast<int>(i) % n == rank;
      if (is_bad_rank) b.data<float>()[0] = step.bad;
      double local_flag = -1;
      const bool found = scaler.unscale({a, b}, [&](double local) {
        local_flag = local;
        Tensor t = Tensor::from_vector<float>({static_cast<float>(local)}, Shape{1});
        pg.all_reduce(t)->wait();
        return static_cast<double>(t.to_f32_vector()[0]);
      });
      EXPECT_EQ(local_flag, is_bad_rank ? 1.0 : 0.0);  // only one rank saw it
      EXPECT_EQ(found, step.overflow);
      EXPECT_EQ(scaler.update(found), step.is_taken);
      EXPECT_EQ(scaler.scale(), step.scale);
      if (step.is_taken) {
        EXPECT_EQ(a.to_f32_vector(), (std::vector<float>{static_cast<float>(rank + 1), -2}));
        EXPECT_EQ(b.to_f32_vector(), (std::vector<float>{3}));
      }
      messages[rank].push_back(scaler.overflow_message());
    }
    final_state[rank] = scaler.state();
  });
  for (int r = 1; r < n; ++r) {
    EXPECT_EQ(final_state[r], final_state[0]) << "rank " << r;
    EXPECT_EQ(messages[r], messages[0]) << "rank " << r;
  }
  EXPECT_EQ(final_state[0], (LossScaler::State{32, 9, 6, 2, true}));
}

TEST(LossScalerRanks, AnOverflowOnOneRankSkipsTheStepOnAllAndKeepsTheirScalesEqual) {
  check_ranks(2);
  check_ranks(4);
}

}  // namespace
}  // namespace braid::parallel
