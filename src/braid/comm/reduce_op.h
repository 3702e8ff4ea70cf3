// The vocabulary of collectives: which operation, and how a reduction combines values.
#pragma once

#include <cstdint>
#include <string_view>

namespace braid::comm {

enum class ReduceOp : uint8_t { sum, avg, max, min };

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
