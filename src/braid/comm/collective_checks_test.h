// The collective checks shared by the local tests (collectives_test.cpp, ranks as threads) and
// the MPI tests (mpi/collectives_mpi_test.cpp, ranks as processes): each takes one rank's group.
// Values are small integers so every dtype holds them exactly and expected results are
// closed-form.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "braid/comm/chunking.h"
#include "braid/comm/process_group.h"

namespace braid::comm::checks {

constexpr DType kTypes[] = {DType::f32, DType::bf16, DType::f16, DType::i32, DType::i64};
// 0 and 1 (fewer elements than ranks), odd, and more than one 4 KiB staging step for every type.
constexpr int64_t kCounts[] = {0, 1, 7, 1031, 5003, 65536};

inline double value(int rank, int64_t i) {
  return (rank + 1) * ((i % 13) + 1);
}

inline Tensor filled(int64_t n, DType t, int rank, int64_t offset = 0) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(value(rank, offset + i));
  Tensor out = Tensor::empty(Shape{n}, t);
  convert_from_f32(v.data(), out.raw_data(), t, n);
  return out;
}

// The reduction of value(0..w-1, i), computed the way Note [Deterministic reduction] says.
inline double expected(ReduceOp op, int w, int64_t i, DType t) {
  double sum = 0;
  for (int r = 0; r < w; ++r) sum += value(r, i);
  switch (op) {
    case ReduceOp::sum:
      return sum;
    case ReduceOp::max:
      return value(w - 1, i);
    case ReduceOp::min:
      return value(0, i);
    case ReduceOp::avg:
      if (is_floating(t)) return static_cast<float>(sum) / static_cast<float>(w);
      return static_cast<double>(static_cast<int64_t>(sum) / w);
  }
  return 0;
}

// Element i of t as a double, after the dtype's own rounding of `want` (for the comparison).
inline void expect_values(const Tensor& t, const std::function<double(int64_t)>& want,
                          const std::string& what) {
  auto got = t.to_f32_vector();
  std::vector<float> w(got.size());
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(want(i));
  Tensor ref = Tensor::empty(Shape{static_cast<int64_t>(w.size())}, t.dtype());
  convert_from_f32(w.data(), ref.raw_data(), t.dtype(), ref.numel());
  auto rv = ref.to_f32_vector();
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != rv[i]) {
      ADD_FAILURE() << what << ": element " << i << " is " << got[i] << ", expected " << rv[i];
      return;
    }
  }
}

inline std::string name(const char* op, DType t, int64_t n, int rank) {
  return detail::concat(op, " ", dtype_name(t), " n=", n, " rank ", rank);
}

inline void all_reduce_every_op_and_type(ProcessGroup& g) {
  for (DType t : kTypes)
    for (int64_t n : kCounts)
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max, ReduceOp::min}) {
        Tensor x = filled(n, t, g.rank());
        g.all_reduce(x, op)->wait();
        expect_values(
            x, [&](int64_t i) { return expected(op, g.size(), i, t); },
            name("all_reduce", t, n, g.rank()) + " " + std::string(reduce_op_name(op)));
      }
}

inline void reduce_scatter_uneven_and_in_place(ProcessGroup& g) {
  for (DType t : kTypes)
    for (int64_t n : kCounts) {
      Chunk c = chunk_of(n, g.size(), g.rank());
      Tensor in = filled(n, t, g.rank());
      Tensor out = Tensor::empty(Shape{c.size}, t);
      g.reduce_scatter(out, in, ReduceOp::sum)->wait();
      auto want = [&](int64_t i) { return expected(ReduceOp::sum, g.size(), c.offset + i, t); };
      expect_values(out, want, name("reduce_scatter", t, n, g.rank()));
      Tensor mine = in.flat_range(c.offset, c.size);  // in place: output is my chunk
      g.reduce_scatter(mine, in.clone(), ReduceOp::sum)->wait();
      g.reduce_scatter(mine, in, ReduceOp::max)->wait();
      expect_values(mine, want, name("reduce_scatter in place", t, n, g.rank()));
    }
}

inline void all_gather_uneven_and_in_place(ProcessGroup& g) {
  for (DType t : kTypes)
    for (int64_t n : kCounts) {
      Chunk c = chunk_of(n, g.size(), g.rank());
      // Element i of the gathered buffer comes from the rank whose chunk holds it.
      auto owner_value = [&](int64_t i) {
        for (int r = 0; r < g.size(); ++r) {
          Chunk cr = chunk_of(n, g.size(), r);
          if (i >= cr.offset && i < cr.offset + cr.size) return value(r, i);
        }
        return -1.0;
      };
      Tensor out = Tensor::zeros(Shape{n}, t);
      g.all_gather(out, filled(c.size, t, g.rank(), c.offset))->wait();
      expect_values(out, owner_value, name("all_gather", t, n, g.rank()));
      Tensor buf = Tensor::zeros(Shape{n}, t);
      Tensor mine = buf.flat_range(c.offset, c.size);
      mine.copy_(filled(c.size, t, g.rank(), c.offset));
      g.all_gather(buf, mine)->wait();
      expect_values(buf, owner_value, name("all_gather in place", t, n, g.rank()));
    }
}

inline void broadcast_from_every_root(ProcessGroup& g) {
  for (DType t : kTypes)
    for (int64_t n : kCounts)
      for (int root = 0; root < g.size(); ++root) {
        Tensor x = filled(n, t, g.rank());
        g.broadcast(x, root)->wait();
        expect_values(
            x, [&](int64_t i) { return value(root, i); },
            name("broadcast", t, n, g.rank()) + " root " + std::to_string(root));
      }
}

inline void all_to_all_uneven(ProcessGroup& g) {
  const int w = g.size();
  for (DType t : kTypes)
    for (int64_t n : kCounts) {
      Chunk mine = chunk_of(n, w, g.rank());
      Tensor out = Tensor::zeros(Shape{w * mine.size}, t);
      g.all_to_all(out, filled(n, t, g.rank()))->wait();
      // Block j holds rank j's values for my chunk.
      expect_values(
          out,
          [&](int64_t i) {
            return value(static_cast<int>(i / std::max<int64_t>(1, mine.size)),
                         mine.offset + i % std::max<int64_t>(1, mine.size));
          },
          name("all_to_all", t, n, g.rank()));
    }
}

inline void send_recv_ring_both_orders(ProcessGroup& g) {
  const int w = g.size();
  if (w == 1) return;
  const int next = (g.rank() + 1) % w, prev = (g.rank() + w - 1) % w;
  for (DType t : kTypes)
    for (int64_t n : kCounts) {
      // Every rank sends first, then receives: sends never wait for the matching recv.
      Tensor got = Tensor::zeros(Shape{n}, t);
      auto s = g.send(filled(n, t, g.rank()), next, 3);
      auto r = g.recv(got, prev, 3);
      r->wait();
      s->wait();
      expect_values(
          got, [&](int64_t i) { return value(prev, i); }, name("recv", t, n, 0));
      // Receives posted before the sends, and interleaved with a collective.
      Tensor got2 = Tensor::zeros(Shape{n}, t);
      auto r2 = g.recv(got2, prev, 4);
      g.barrier()->wait();
      g.send(filled(n, t, g.rank()), next, 4)->wait();
      r2->wait();
      expect_values(
          got2, [&](int64_t i) { return value(prev, i); }, name("recv2", t, n, 0));
    }
}

inline void many_in_flight_complete_in_order(ProcessGroup& g) {
  std::vector<Tensor> xs;
  std::vector<std::shared_ptr<Work>> works;
  for (int k = 0; k < 20; ++k) {
    xs.push_back(Tensor::full(Shape{100 + k}, k + g.rank()));
    works.push_back(g.all_reduce(xs.back()));
  }
  works.push_back(g.barrier());
  works.back()->wait();
  for (int k = 0; k < 20; ++k) {
    EXPECT_TRUE(works[k]->is_completed());  // collectives complete in issue order
    EXPECT_EQ(works[k]->seq(), works[0]->seq() + k);
    const int w = g.size();
    EXPECT_EQ(xs[k].to_f32_vector()[0], k * w + w * (w - 1) / 2);
  }
}

// Every check above, in order.
inline void all_collectives(ProcessGroup& g) {
  all_reduce_every_op_and_type(g);
  reduce_scatter_uneven_and_in_place(g);
  all_gather_uneven_and_in_place(g);
  broadcast_from_every_root(g);
  all_to_all_uneven(g);
  send_recv_ring_both_orders(g);
  many_in_flight_complete_in_order(g);
}

}  // namespace braid::comm::checks
