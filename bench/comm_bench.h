// The communication benchmark behind `braid bench comm`: for each collective and size, the time
// per call (slowest rank), algorithm and bus bandwidth as nccl-tests defines them, for braid's
// ProcessGroup and, side by side, for the plain MPI call when the group runs on MPI.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "braid/comm/process_group.h"

namespace braid::bench {

struct CommBenchOptions {
  int64_t min_bytes = 4 << 10;
  int64_t max_bytes = int64_t{256} << 20;
  int iters = 20;  // timed calls per size, fewer for big sizes (at most ~2 GiB moved per size)
  int warmup = 3;
  int rounds = 3;  // report the best of this many timed rounds (the machine may be shared)
  DType dtype = DType::f32;
  std::vector<std::string> ops = {"all_reduce", "reduce_scatter", "all_gather", "broadcast",
                                  "all_to_all"};
  bool raw = true;    // also time the raw MPI call
  bool check = true;  // verify braid's all_reduce result once per size
};

// "4K", "16M", "1G", "4096" (binary units) -> bytes; throws on anything else.
int64_t parse_bytes(const std::string& text);

// Collective over `group`; rank 0 prints the table to `out`.
void run_comm_bench(comm::ProcessGroup& group, const CommBenchOptions& options, FILE* out);

}  // namespace braid::bench
