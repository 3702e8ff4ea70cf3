// The vocabulary of collectives: which operation, and how a reduction combines values.
#pragma once

#include <cstdint>
#include <string_view>

namespace braid::comm {

enum class ReduceOp : uint8_t { sum, avg, max, min };

// How two values combine under `op`: avg by sum, divided by the rank count once at the end.
constexpr ReduceOp combine_of(ReduceOp op) {
  return op == ReduceOp::avg ? ReduceOp::sum : op;
}

enum class OpType : uint8_t {
  none,
  all_reduce,
  reduce_scatter,
  all_gather,
  broadcast,
  send,
  recv,
  all_to_all,
  barrier,
  split,
};

std::string_view reduce_op_name(ReduceOp op);
std::string_view op_type_name(OpType op);

}  // namespace braid::comm
