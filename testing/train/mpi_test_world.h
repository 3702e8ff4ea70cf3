// The world of a test binary run as real processes under mpirun (scripts/mpirun-test.sh): one
// MPI group for the whole process, with a collective timeout short enough for tests.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <memory>

#include "braid/comm/world.h"
#include "testing/tensor_compare.h"

namespace braid::train {

inline std::shared_ptr<comm::ProcessGroup> mpi_test_world() {
  static std::shared_ptr<comm::ProcessGroup> w = [] {
    comm::ProcessGroupOptions o;
    o.timeout = std::chrono::seconds(60);
    return comm::init_world(o);
  }();
  return w;
}

// Every rank's tensor equals rank 0's, bit for bit.
inline ::testing::AssertionResult same_on_every_rank(const Tensor& w) {
  Tensor all = Tensor::empty(Shape{w.numel() * mpi_test_world()->size()});
  mpi_test_world()->all_gather(all, w)->wait();
  for (int r = 1; r < mpi_test_world()->size(); ++r)
    if (auto ok = braid::testing::bit_equal(all.flat_range(r * w.numel(), w.numel()), w); !ok)
      return ok << " (rank " << r << " vs rank 0)";
  return ::testing::AssertionSuccess();
}

// main() of such a binary: the world exists before any test (MPI starts once per process).
inline int mpi_test_main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  mpi_test_world();
  return RUN_ALL_TESTS();
}

}  // namespace braid::train
