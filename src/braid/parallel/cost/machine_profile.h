// MachineProfile: what the step-time model (step_cost.h) knows of a machine. Either measured on
// this machine (`braid plan --calibrate`, calibrate.h) or written by hand from a spec sheet, to
// plan clusters braid cannot reach (docs/plan.md has examples).
//
// Note [Machine profile]: a node holds `ranks_per_node` ranks at most (a GPU node: its GPUs; a
// CPU node: any number, each with cores / ranks threads, oversubscribed past the cores). Rates
// are one rank's while every rank of the node works at once, so they include what the ranks
// share (memory bandwidth, cores), and are kept per ranks-per-node count; between the counts
// measured, a rank's rate scales with its share of the cores (compute_at()).
//   GEMM      time = flops / (gflops x min_dim / (min_dim + gemm_half_dim)): large products run
//             at the rate, small ones lose in proportion to their smallest dimension
//   attention per (sequence, head): time = a T^2 hs + c T hs (forward; backward its own pair)
//   memory    time per element of each op class (elementwise_ns: "layernorm", "gelu", "adamw",
//             ...); a class the profile lacks costs its bytes (op_bytes()) at stream_gbs
//   overhead  per op dispatched (autograd node + kernel call)
// Links: t(bytes) = latency_us + bytes / gbs, fitted per collective and group size inside a
// node ("node") and between nodes ("network"), bytes being one rank's buffer (the all-reduce's
// whole tensor, the reduce-scatter's input, the all-gather's output).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "braid/core/dtype.h"

namespace braid::parallel::cost {

struct ComputeRates {
  int ranks = 1;    // ranks working at once on the node
  int threads = 1;  // threads each
  double gemm_gflops_f32 = 0, gemm_gflops_bf16 = 0;
  double gemm_half_dim = 0;
  // Attention per (sequence, head): forward a T^2 hs + c T hs ns, backward likewise.
  double attn_fwd_a_ns = 0, attn_fwd_c_ns = 0, attn_bwd_a_ns = 0, attn_bwd_c_ns = 0;
  double attn_bf16_factor = 1;                   // bf16 attention's time / f32's
  double stream_gbs = 0;                         // memory-bound ops without their own rate
  std::map<std::string, double> elementwise_ns;  // per element, by op class (f32)
  double op_overhead_us = 0;

  double gemm_gflops(DType dtype) const;
};

struct LinkFit {
  double latency_us = 0;
  double gbs = 0;  // GB/s (1e9 bytes)
  double seconds(double bytes) const;
};

// One transport's fits: per op ("all_reduce", "reduce_scatter", "all_gather", "broadcast",
// "send_recv"), per group size.
struct TransportFits {
  std::map<std::string, std::map<int, LinkFit>> ops;
  bool empty() const { return ops.empty(); }
  // The fit for `op` at `size` ranks: the size measured, else the nearest below or above
  // with the ring's bytes scaled ((g - 1) / g); throws naming the op when there is none.
  double seconds(const std::string& op, int size, double bytes) const;
};

struct MachineProfile {
  std::string name;             // "this machine", "DGX H100", ...
  std::string device = "cpu";   // cpu | cuda
  std::string cpu;              // lscpu's model name where calibrated
  int cores = 1;                // the node's cores (cpu)
  int ranks_per_node = 0;       // 0: any (cpu); a GPU node's GPUs
  int64_t memory_per_rank = 0;  // bytes a rank may use (GPU: its memory; 0: node / ranks)
  int64_t node_memory = 0;      // the node's memory (cpu)
  double disk_read_gbs = 0, disk_write_gbs = 0;  // offload files
  // The MFU denominator per rank, when it is not the GEMM rate: a spec sheet's dense peak
  // (peak_tflops_bf16 / peak_tflops_f32), which published MFU figures use. 0: the GEMM rate of
  // large products (a calibrated profile's, as braid train's MFU).
  double peak_gflops_bf16 = 0, peak_gflops_f32 = 0;
  std::vector<ComputeRates> compute;  // by ranks, ascending
  TransportFits node, network;
  std::string calibrated_at;  // date, or "spec sheet"

  // One rank's rates when `ranks` ranks share a node: the entry measured for that many, else
  // the nearest below scaled by its share of the cores. Throws when the profile has none.
  ComputeRates compute_at(int ranks) const;
  int64_t rank_memory(int ranks_on_node) const;  // the budget of a rank
  void validate() const;                         // throws naming the field
};

// JSON: the calibrated form, or the spec-sheet form (docs/plan.md) whose fields are
//   name, device, ranks_per_node, memory_per_rank_gib, gemm_tflops_bf16, gemm_tflops_f32,
//   memory_gbs, node_link {latency_us, gbs}, network_link {latency_us, gbs}
// which fills the same structure (rates derived from the bandwidths: Note [Spec profiles]).
// Errors name the file and the field.
MachineProfile load_profile(const std::string& path);
MachineProfile profile_from_json(const std::string& text, const std::string& source);
std::string profile_to_json(const MachineProfile& profile);
void save_profile(const MachineProfile& profile, const std::string& path);

// This machine's CPU as /proc/cpuinfo names it ("" if it does not), which a calibrated profile
// records.
std::string cpu_model_name();

// $BRAID_MACHINE_PROFILE, else ~/.cache/braid/machine-<host>.json.
std::string default_profile_path();

// Bytes an op class moves per element (f32), for classes a profile has no rate for.
double op_bytes(const std::string& op_class);

}  // namespace braid::parallel::cost
