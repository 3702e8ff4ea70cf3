// The world of a test binary run as real processes under mpirun (scripts/mpirun-test.sh): one
// MPI group for the whole process, with a collective timeout short enough for tests.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <memory>

#include "braid/comm/world.h"

namespace braid::train {

inline std::shared_ptr<comm::ProcessGroup> mpi_test_world() {
  static std::shared_ptr<comm::ProcessGroup> w = [] {
    comm::ProcessGroupOptions o;
    o.timeout = std::chrono::seconds(60);
    return comm::init_world(o);
  }();
  return w;
}

// main() of such a binary: the world exists before any test (MPI starts once per process).
inline int mpi_test_main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  mpi_test_world();
  return RUN_ALL_TESTS();
}

}  // namespace braid::train
