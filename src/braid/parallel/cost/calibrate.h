// Calibration: measures this machine into a MachineProfile (machine_profile.h) for the
// step-time model, in about a minute (`braid plan --calibrate`).
//
// Note [Calibration]: a rank's rates are measured while `ranks` ranks work at once, as ranks
// of one node do in training: `ranks` threads, each running the kernels on its own OpenMP team
// of cores / ranks threads (ranks beyond the cores time-slice them, as oversubscribed processes
// do), started together at a barrier; each time is the mean of the repetitions between the
// barrier they start at and the one after the slowest, the best of three such rounds, averaged
// over the ranks. Per count of ranks it measures
//   GEMM        forward and backward products (NT, NN, TN) of a linear layer over 1024 rows
//               at widths 128 to 1024 and 384 x 1536, f32 and bf16; the rate and the half
//               dimension are the least-squares fit of time = flops (d + h) / (rate d)
//   attention   forward and backward of causal attention at T = 128 and 512 (hs 64): the two
//               points give a and c of a T^2 hs + c T hs
//   memory      each op class of op_bytes() on a 2048 x 512 activation (x 4 for the MLP's),
//               f32 and bf16; the LM head + loss's time beyond its products per logit, forward
//               and backward ("ce_fwd", "ce_bwd"); AdamW, casts, the exact norm, max and
//               zeroing on 4M elements; a fresh 4M-element buffer ("alloc": page faults and
//               zeroing); a 16M-element add for the streaming bandwidth
//   overhead    a 16-element add, per call
// Collectives: ranks as threads of one process on a local group, which runs the same
// shared-memory engine as processes on one node (comm/shm/shm_engine.h): all-reduce,
// reduce-scatter, all-gather, broadcast and send/recv at 64 KiB to 32 MiB, per group size,
// fitted as latency + bytes / bandwidth. The disk: a 256 MiB file overwritten and read back in
// 8 MiB O_DIRECT transfers, as the offload file moves its pages.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "braid/comm/process_group.h"
#include "braid/parallel/cost/machine_profile.h"

namespace braid::parallel::cost {

struct CalibrateOptions {
  std::vector<int> ranks;        // counts of ranks per node to measure (empty: 1, 2, 4, 8 up
                                 // to the cores; beyond them compute_at() shares the cores)
  std::vector<int> group_sizes;  // collective group sizes (empty: 2, 4)
  std::string disk_dir;          // where the disk test writes ("": no disk test)
  int reps = 5;                  // repetitions per measurement round
  std::function<void(const std::string&)> log;  // progress lines (may be empty)
};

MachineProfile calibrate(const CalibrateOptions& options);

// The pieces calibrate() runs (calibrate_links.cpp):
// each collective at 64 KiB to 32 MiB over groups of each size, ranks as threads of a local
// group with cores / size OpenMP threads each, fitted per op and size;
TransportFits measure_node_collectives(const std::vector<int>& sizes, int cores, int reps,
                                       const std::function<void(const std::string&)>& log);
// Note [Network calibration]: the links between hosts, measured by the ranks of a job that
// spans them (`braid plan --calibrate-network` under braid launch --hostfile, mpirun or srun):
// each collective at 64 KiB to 32 MiB over one rank per host (the first on each), and over the
// whole world where a host holds several, each group's time its slowest rank's median, fitted
// per op and group size. The step-time model prices a group that spans hosts by these fits
// (step_cost.cpp, comm_seconds). Collective over world; throws on every rank when it holds
// ranks of one host only.
TransportFits measure_network_collectives(comm::ProcessGroup& world, int reps,
                                          const std::function<void(const std::string&)>& log);
// a 256 MiB file in `dir` overwritten and read back as the offload file does, into p's disk
// rates;
void measure_disk(const std::string& dir, MachineProfile& p);
// fn(i) on n threads at once; the first exception is rethrown after all have joined, and a
// thread that throws calls on_error (if any) first, to release the others' barriers.
void run_rank_threads(int n, const std::function<void(int)>& fn,
                      const std::function<void()>& on_error = {});

// The least-squares fit of times[i] = latency + bytes[i] / bandwidth (seconds, bytes).
LinkFit fit_link(const std::vector<double>& bytes, const std::vector<double>& seconds);

// The GEMM rate (GFLOP/s) and half dimension that best fit times of products of given
// flops and smallest dimensions (relative error, least squares).
void fit_gemm(const std::vector<double>& flops, const std::vector<double>& min_dim,
              const std::vector<double>& seconds, double& gflops, double& half_dim);

}  // namespace braid::parallel::cost
