// Every collective x dtype x world size 1-4, uneven sizes, on the local backend (ranks as
// threads; the tsan preset runs these under ThreadSanitizer).
#include <gtest/gtest.h>

#include "braid/comm/collective_checks_test.h"
#include "testing/run_ranks.h"

namespace braid::comm {
namespace {

using braid::testing::run_ranks;

class Collectives : public ::testing::TestWithParam<int> {};

TEST_P(Collectives, AllReduceEveryOpAndType) {
  run_ranks(GetParam(), checks::all_reduce_every_op_and_type);
}
TEST_P(Collectives, ReduceScatterUnevenAndInPlace) {
  run_ranks(GetParam(), checks::reduce_scatter_uneven_and_in_place);
}
TEST_P(Collectives, AllGatherUnevenAndInPlace) {
  run_ranks(GetParam(), checks::all_gather_uneven_and_in_place);
}
TEST_P(Collectives, BroadcastFromEveryRoot) {
  run_ranks(GetParam(), checks::broadcast_from_every_root);
}
TEST_P(Collectives, AllToAllUneven) {
  run_ranks(GetParam(), checks::all_to_all_uneven);
}
TEST_P(Collectives, SendRecvRingBothOrders) {
  run_ranks(GetParam(), checks::send_recv_ring_both_orders);
}
TEST_P(Collectives, ManyInFlightCompleteInOrder) {
  run_ranks(GetParam(), checks::many_in_flight_complete_in_order);
}

INSTANTIATE_TEST_SUITE_P(WorldSize, Collectives, ::testing::Values(1, 2, 3, 4),
                         [](const auto& info) { return "w" + std::to_string(info.param); });

}  // namespace
}  // namespace braid::comm
