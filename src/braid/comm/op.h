// One queued operation of a ProcessGroup, and its fingerprint: what every rank of the group must
// agree on before a collective moves data (Note [Fingerprints]).
#pragma once

#include <cstdint>
#include <string>

#include "braid/comm/reduce_op.h"
#include "braid/core/tensor.h"

namespace braid::comm {

// Note [Fingerprints]: (op, dtype, reduce op, root, count, seq). count is the one number that
// is the same on every rank: the input numel for all_reduce, reduce_scatter, all_to_all and
// broadcast, the output numel for all_gather, 0 for barrier. Plain data: it lives in shared
// memory and travels in messages.
struct Fingerprint {
  uint8_t op = 0;
  uint8_t dtype = 0;
  uint8_t reduce = 0;
  uint8_t pad = 0;
  int32_t root = -1;
  int64_t count = 0;
  uint64_t seq = 0;

  bool operator==(const Fingerprint&) const = default;
  std::string str() const;  // "all_reduce(f32, count 1024, sum)"
};

// Note [Lazy descriptions]: what a Work needs to name its operation in an error, without the
// tensors. Formatting the description up front (two ostringstreams and the group prefix) took
// about 1 us per call, as long as a whole 4 KiB all_gather; it is only read when something
// fails, so Works keep this and format on demand.
struct OpSummary {
  Fingerprint fp;     // op, dtype, count, reduce op, root, seq; p2p: dtype and count of the tensor
  int32_t peer = -1;  // send destination, recv source
  int32_t tag = 0;    // send/recv

  OpType type() const { return static_cast<OpType>(fp.op); }
  std::string str() const;  // "all_reduce seq 5 (f32, count 1024, sum)"
};

struct CollectiveOp {
  OpType type = OpType::none;
  uint64_t seq = 0;
  Tensor in;  // all_reduce and broadcast: the tensor, also in `out`
  Tensor out;
  ReduceOp reduce = ReduceOp::sum;
  int root = -1;  // broadcast root; send destination; recv source
  int tag = 0;    // send/recv

  static CollectiveOp make(OpType type, Tensor in = {}, Tensor out = {},
                           ReduceOp reduce = ReduceOp::sum, int root = -1, int tag = 0) {
    CollectiveOp op;
    op.type = type;
    op.in = std::move(in);
    op.out = std::move(out);
    op.reduce = reduce;
    op.root = root;
    op.tag = tag;
    return op;
  }

  Fingerprint fingerprint() const;
  OpSummary summary() const;
  std::string describe() const { return summary().str(); }  // "all_reduce seq 5 (...)"
};

// The bytes of a tensor held by an op: the handle is const, the data it points to is not.
inline char* bytes_of(const Tensor& t) {
  return static_cast<char*>(const_cast<Tensor&>(t).raw_data());
}

}  // namespace braid::comm
