#include "braid/train/memory_estimate_table.h"

#include <cstdio>
#include <sstream>
#include <thread>

#include "braid/core/error.h"
#include "braid/core/memory_tracker.h"
#include "braid/train/plan_config.h"
#include "braid/train/trainer.h"

namespace braid::train {

namespace {

// Bytes of optimizer state per parameter: AdamW's two moments, SGD's momentum buffer.
int64_t optimizer_bytes(const config::OptimizerSection& o) {
  if (o.type == "adamw") return 8;
  if (o.type == "sgd") return o.momentum != 0 ? 4 : 0;
  BRAID_THROW("optimizer.type: unknown optimizer '", o.type, "' (adamw, sgd)");
}

int in_threads(const config::TrainConfig& cfg, int world_size, const RankRuntime& runtime) {
  return memory_estimate_inputs(cfg, world_size, runtime).threads;
}

std::string cell(int64_t bytes) {
  return format_bytes(bytes);
}

// " as tp 2 x cp 2 (ring) x pp 2 x dp 2" (nothing without model or context parallelism)
std::string layout(const config::TrainConfig& cfg, int world) {
  const int64_t tp = std::max<int64_t>(1, cfg.parallel.tensor_parallel_size);
  const int64_t pp = std::max<int64_t>(1, cfg.parallel.pipeline_parallel_size);
  const int64_t cp = std::max<int64_t>(1, cfg.parallel.context_parallel_size);
  if (tp == 1 && pp == 1 && cp == 1) return "";
  std::string s = " as";
  if (tp > 1)
    s += " tp " + std::to_string(tp) +
         (cfg.parallel.sequence_parallel ? " (sequence parallel)" : "") + " x";
  if (cp > 1)
    s += " cp " + std::to_string(cp) + " (" + cfg.parallel.context_parallel_mode + ", " +
         std::to_string(cfg.data.seq_len / cp) + " tokens of each sequence per rank) x";
  if (pp > 1)
    s += " pp " + std::to_string(pp) + " (" + cfg.parallel.pipeline_schedule + ", " +
         (cfg.parallel.pipeline_virtual_stages > 1
              ? std::to_string(cfg.parallel.pipeline_virtual_stages) + " chunks a rank, "
              : "") +
         (cfg.parallel.pipeline_balance != "uniform"
              ? "stages balanced by " + cfg.parallel.pipeline_balance + ", "
              : "") +
         std::to_string(std::max<int64_t>(1, cfg.training.gradient_accumulation_steps)) +
         " micro-batches) x";
  return s + " dp " + std::to_string(world / (tp * pp * cp));
}

}  // namespace

parallel::MemoryEstimateInputs memory_estimate_inputs(const config::TrainConfig& cfg,
                                                      int world_size, const RankRuntime& runtime) {
  BRAID_CHECK(world_size >= 1, "world size must be >= 1, got ", world_size);
  BRAID_CHECK(runtime.threads >= 0, "--threads must be >= 1, got ", runtime.threads);
  parallel::MemoryEstimateInputs in;
  in.model = model_config_from(cfg);
  in.spec = parallel_plan_from(cfg);
  in.world_size = world_size;
  in.compute = cfg.compute_dtype();
  in.optimizer_bytes_per_param = optimizer_bytes(cfg.optimizer);
  in.micro_batches = std::max<int64_t>(1, cfg.training.gradient_accumulation_steps);
  // braid launch's default: this machine's cores shared by the ranks (launch/mpirun_command.cpp)
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  in.threads = runtime.threads > 0 ? runtime.threads : std::max(1, cores / world_size);
  in.backend = runtime.backend;
  in.on_device = cfg.training.device != "cpu";
  return in;
}

std::vector<parallel::MemoryEstimate> estimate_strategies(const config::TrainConfig& cfg,
                                                          int world_size,
                                                          const std::vector<std::string>& names,
                                                          const RankRuntime& runtime) {
  parallel::MemoryEstimateInputs in = memory_estimate_inputs(cfg, world_size, runtime);
  std::vector<parallel::MemoryEstimate> out;
  for (const std::string& name : names) {
    in.spec.name = name;
    out.push_back(parallel::estimate_memory(in));
  }
  return out;
}

std::string memory_estimate_table(const config::TrainConfig& cfg, int world_size,
                                  const std::vector<parallel::MemoryEstimate>& estimates,
                                  const RankRuntime& runtime) {
  const nn::ModelConfig m = model_config_from(cfg);
  std::ostringstream os;
  const std::string model = cfg.model.preset.empty() ? cfg.model.config : cfg.model.preset;
  os << "Memory per rank for " << model << " (" << m.model_type() << ", "
     << m.num_parameters() / 1e6 << "M parameters) on " << world_size << " rank(s)"
     << layout(cfg, world_size) << ", " << cfg.training.precision << ", micro-batch "
     << std::max<int64_t>(1, cfg.training.micro_batch_size) << " x " << cfg.data.seq_len
     << " tokens, activation checkpointing " << m.activation_checkpointing.str() << ", "
     << cfg.optimizer.type << ", " << in_threads(cfg, world_size, runtime)
     << " thread(s) per rank, " << runtime.backend.kind << " backend\n";
  const char* header[] = {"strategy",    "parameters",    "gradients", "optimizer",
                          "activations", "communication", "scratch",   "total"};
  char line[256];
  std::snprintf(line, sizeof line, "%-24s %11s %11s %11s %11s %13s %11s %11s\n", header[0],
                header[1], header[2], header[3], header[4], header[5], header[6], header[7]);
  os << line;
  for (const auto& e : estimates) {
    const std::string name = e.strategy + (cfg.parallel.pipeline_parallel_size > 1
                                               ? " (stage " + std::to_string(e.stage) + ")"
                                               : std::string());
    std::snprintf(line, sizeof line, "%-24s %11s %11s %11s %11s %13s %11s %11s\n", name.c_str(),
                  cell(e.parameters).c_str(), cell(e.gradients).c_str(),
                  cell(e.optimizer_state).c_str(), cell(e.activations).c_str(),
                  cell(e.communication).c_str(), cell(e.scratch).c_str(), cell(e.total()).c_str());
    os << line;
  }
  os << "Parameters: f32 masters (and the compute copy in bf16/fp16); gradients and optimizer "
        "state f32; activations: the peak of one micro-step's forward and backward (of a pipeline "
        "stage's "
        "micro-batches in flight); communication: the process groups' shared memory and the "
        "largest staging buffer; scratch: the kernels' per-thread buffers and the GEMM "
        "library's work memory at this thread count.\n";
  return os.str();
}

}  // namespace braid::train
