// BRAID_FAULT_PLAN parsing: entries and the one-line error for a bad one.
#include "braid/launch/fault_plan.h"

#include <gtest/gtest.h>

#include "braid/core/error.h"

namespace braid::launch {
namespace {

TEST(FaultPlan, ParsesEntriesAndRefusesBadOnesByName) {
  const FaultPlan plan = FaultPlan::parse("0:1:4:save:write;2:0:7:backward;");
  ASSERT_EQ(plan.points().size(), 2u);
  EXPECT_EQ(plan.points()[0].attempt, 0);
  EXPECT_EQ(plan.points()[0].rank, 1);
  EXPECT_EQ(plan.points()[0].step, 4);
  EXPECT_EQ(plan.points()[0].point, "save:write");
  EXPECT_EQ(plan.points()[1].point, "backward");
  EXPECT_TRUE(FaultPlan::parse("").empty());
  for (const char* bad : {"0:1:4:lunch", "0:1:forward", "a:1:4:forward"}) {
    try {
      FaultPlan::parse(bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("'") + bad + "'"), std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace braid::launch
