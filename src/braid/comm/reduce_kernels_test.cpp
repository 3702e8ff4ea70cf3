// reduce_ranks: streaming stores (Note [Streaming stores]) give the same bits as plain stores,
// for every dtype and op, block-ragged counts and destinations not aligned to a vector.
#include "braid/comm/reduce_kernels.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "braid/core/rng.h"
#include "braid/core/tensor.h"

namespace braid::comm {
namespace {

TEST(ReduceRanks, StreamingStoresGiveTheSameBits) {
  for (DType t : {DType::f32, DType::bf16, DType::f16, DType::i32, DType::i64})
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max, ReduceOp::min})
      for (int n : {1, 2, 3})
        for (int64_t count : {int64_t{1}, int64_t{1023}, int64_t{3 * 1024 + 17}}) {
          std::vector<Tensor> in;
          std::vector<const void*> srcs;
          for (int r = 0; r < n; ++r) {
            Rng rng(77 + r);
            in.push_back(Tensor::randn(Shape{count}, rng, 100.0f).to(t));
            srcs.push_back(in.back().raw_data());
          }
          const size_t bytes = count * dtype_size(t);
          std::vector<char> plain(bytes), streamed(bytes + 64);
          for (size_t shift : {size_t{0}, size_t{4}, dtype_size(t)}) {
            reduce_ranks(srcs.data(), n, plain.data(), nullptr, count, t, op);
            reduce_ranks(srcs.data(), n, streamed.data() + shift, nullptr, count, t, op, true);
            EXPECT_EQ(std::memcmp(plain.data(), streamed.data() + shift, bytes), 0)
                << dtype_name(t) << " " << reduce_op_name(op) << " ranks " << n << " count "
                << count << " shift " << shift;
          }
        }
}

TEST(ReduceRanks, StreamingTakesOneDestination) {
  Tensor a = Tensor::zeros(Shape{4}, DType::f32), b = a.clone(), c = a.clone();
  const void* srcs[] = {a.raw_data()};
  EXPECT_THROW(
      reduce_ranks(srcs, 1, b.raw_data(), c.raw_data(), 4, DType::f32, ReduceOp::sum, true), Error);
}

}  // namespace
}  // namespace braid::comm
