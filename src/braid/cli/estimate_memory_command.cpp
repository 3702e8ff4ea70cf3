// braid estimate-memory: what each rank would keep, per category, for a model, strategy and
// batch, without running anything (train/memory_estimate_table.h).
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "braid/cli/args.h"
#include "braid/cli/command.h"
#include "braid/config/config.h"
#include "braid/core/error.h"
#include "braid/nn/model_config.h"
#include "braid/train/memory_estimate_table.h"

namespace {

constexpr const char* kUsage =
    "usage: braid estimate-memory --model PRESET|config.json [options]\n"
    "       braid estimate-memory --config braid.yaml [options]\n"
    "\n"
    "Prints what each rank keeps at its peak, per category (parameters, gradients, optimizer\n"
    "state, activations, communication, scratch), one row per strategy. Options override the\n"
    "config's values.\n"
    "  --model M                      a preset (gpt2-small, llama-7b, ...), an HF config.json or\n"
    "                                 a directory holding one\n"
    "  --config FILE                  take model, strategy, batch and precision from a braid "
    "config\n"
    "  --strategy S                   all (ddp, zero1, zero2, zero3), none, ddp, zero1, zero2,\n"
    "                                 zero3 or fsdp (default: the config's, else all)\n"
    "  --sharding-strategy S          fsdp: FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD,\n"
    "                                 HYBRID_SHARD_ZERO2\n"
    "  --world-size N                 ranks (default 1)\n"
    "  --tp N                         tensor-parallel ranks per group (default 1)\n"
    "  --pp N                         pipeline stages (default 1; uniform stages of blocks; the\n"
    "                                 strategy runs over world-size / (tp x pp) ranks, and the "
    "row\n"
    "                                 shown is the stage with the largest total)\n"
    "  --pipeline-schedule S          1f1b (default) or gpipe\n"
    "  --gradient-accumulation-steps M  micro-batches per step (default 1): what a pipeline\n"
    "                                 keeps in flight\n"
    "  --precision P                  fp32, bf16 or fp16 (default fp32)\n"
    "  --micro-batch-size B           sequences per rank per micro-step (default 1)\n"
    "  --seq-len T                    tokens per sequence (default 1024, at most the model's)\n"
    "  --activation-checkpointing K   none, full or selective (default none)\n"
    "  --offload                      optimizer state (and for zero3/fsdp parameters) to files\n"
    "  --threads N                    OpenMP threads per rank (default: this machine's cores\n"
    "                                 divided by the ranks, as braid launch gives them)\n"
    "  --backend B                    mpi (processes on one node, default) or local (ranks as\n"
    "                                 threads of one process)\n";

bool is_one_of(const std::string& v, const std::vector<std::string>& choices) {
  for (const auto& c : choices)
    if (v == c) return true;
  return false;
}

std::string choices(const std::vector<std::string>& cs) {
  std::string s;
  for (const auto& c : cs) s += (s.empty() ? "" : ", ") + c;
  return s;
}

int run_estimate_memory(const std::vector<std::string>& args) {
  namespace fs = std::filesystem;
  using braid::cli::parse_int;
  std::string model, config, strategy, sharding, precision, checkpointing;
  int64_t world = 1, micro = 0, seq_len = 0, tp = 0, pp = 0, accumulation = 0, threads = 0;
  braid::train::RankRuntime runtime;
  std::string schedule;
  bool offload = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> const std::string& {
      BRAID_CHECK(i + 1 < args.size(), a, " needs a value (see braid estimate-memory --help)");
      return args[++i];
    };
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (a == "--model") {
      model = value();
    } else if (a == "--config") {
      config = value();
    } else if (a == "--strategy") {
      strategy = value();
    } else if (a == "--sharding-strategy") {
      sharding = value();
    } else if (a == "--world-size") {
      world = parse_int(a, value());
    } else if (a == "--tp") {
      tp = parse_int(a, value());
    } else if (a == "--pp") {
      pp = parse_int(a, value());
    } else if (a == "--pipeline-schedule") {
      schedule = value();
    } else if (a == "--gradient-accumulation-steps") {
      accumulation = parse_int(a, value());
    } else if (a == "--precision") {
      precision = value();
    } else if (a == "--micro-batch-size") {
      micro = parse_int(a, value());
    } else if (a == "--seq-len") {
      seq_len = parse_int(a, value());
    } else if (a == "--activation-checkpointing") {
      checkpointing = value();
    } else if (a == "--offload") {
      offload = true;
    } else if (a == "--threads") {
      threads = parse_int(a, value());
      BRAID_CHECK(threads >= 1 && threads <= 1 << 16, "--threads must be in [1, 65536], got ",
                  threads);
    } else if (a == "--backend") {
      runtime.backend.kind = value();
      BRAID_CHECK(runtime.backend.kind == "mpi" || runtime.backend.kind == "local",
                  "--backend: unknown '", runtime.backend.kind, "' (",
                  braid::parallel::comm_backend_names(), ")");
    } else {
      BRAID_THROW("unknown option '", a, "' (see braid estimate-memory --help)");
    }
  }
  BRAID_CHECK(!model.empty() || !config.empty(),
              "--model PRESET|config.json or --config FILE is required");
  BRAID_CHECK(world >= 1 && world <= 1 << 20, "--world-size must be in [1, 1048576], got ", world);
  BRAID_CHECK(tp >= 0 && tp <= world && (tp == 0 || world % tp == 0), "--tp ", tp,
              " must divide --world-size ", world);
  BRAID_CHECK(pp >= 0 && (pp == 0 || world % (pp * std::max<int64_t>(tp, 1)) == 0), "--pp ", pp,
              " x --tp ", std::max<int64_t>(tp, 1), " must divide --world-size ", world);
  BRAID_CHECK(accumulation >= 0, "--gradient-accumulation-steps must be >= 1, got ", accumulation);
  BRAID_CHECK(schedule.empty() || schedule == "1f1b" || schedule == "gpipe",
              "--pipeline-schedule: unknown '", schedule, "' (1f1b, gpipe)");
  BRAID_CHECK(micro >= 0, "--micro-batch-size must be >= 1, got ", micro);
  BRAID_CHECK(seq_len >= 0, "--seq-len must be >= 1, got ", seq_len);
  const std::vector<std::string> strategies = {"all",   "none",  "ddp", "zero1",
                                               "zero2", "zero3", "fsdp"};
  BRAID_CHECK(strategy.empty() || is_one_of(strategy, strategies), "--strategy: unknown strategy '",
              strategy, "' (", choices(strategies), ")");
  const std::vector<std::string> precisions = {"fp32", "bf16", "fp16"};
  BRAID_CHECK(precision.empty() || is_one_of(precision, precisions), "--precision: unknown '",
              precision, "' (", choices(precisions), ")");
  const std::vector<std::string> policies = {"none", "full", "selective"};
  BRAID_CHECK(checkpointing.empty() || is_one_of(checkpointing, policies),
              "--activation-checkpointing: unknown '", checkpointing, "' (", choices(policies),
              ")");

  braid::config::TrainConfig cfg;
  if (!config.empty()) cfg = braid::config::load_config(config);
  if (!model.empty()) {
    cfg.model.preset.clear();
    cfg.model.config.clear();
    cfg.model.init_from.clear();
    if (fs::is_directory(model)) {
      cfg.model.config = (fs::path(model) / "config.json").string();
    } else if (model.ends_with(".json") || fs::exists(model)) {
      cfg.model.config = model;
    } else {
      // Throws naming the preset and the known ones.
      try {
        braid::nn::ModelConfig::preset(model);
      } catch (const braid::Error& e) {
        BRAID_THROW("--model: ", e.what());
      }
      cfg.model.preset = model;
    }
  }
  if (seq_len > 0) cfg.data.seq_len = seq_len;
  using braid::nn::ModelConfig;
  const ModelConfig mc =
      !cfg.model.init_from.empty()
          ? ModelConfig::from_hf_file(fs::path(cfg.model.init_from) / "config.json")
      : !cfg.model.config.empty() ? ModelConfig::from_hf_file(cfg.model.config)
                                  : ModelConfig::preset(cfg.model.preset);
  if (!model.empty() && seq_len == 0) cfg.data.seq_len = std::min<int64_t>(1024, mc.max_seq_len);
  BRAID_CHECK(cfg.data.seq_len <= mc.max_seq_len, "--seq-len ", cfg.data.seq_len,
              " exceeds the model's maximum sequence length ", mc.max_seq_len);
  if (micro > 0) cfg.training.micro_batch_size = micro;
  if (tp > 0) cfg.parallel.tensor_parallel_size = tp;
  if (pp > 0) cfg.parallel.pipeline_parallel_size = pp;
  if (!schedule.empty()) cfg.parallel.pipeline_schedule = schedule;
  if (accumulation > 0) cfg.training.gradient_accumulation_steps = accumulation;
  if (!precision.empty()) cfg.training.precision = precision;
  if (!checkpointing.empty()) cfg.model.activation_checkpointing = checkpointing;
  if (!sharding.empty()) cfg.parallel.sharding_strategy = sharding;
  if (offload) {
    cfg.parallel.offload_optimizer = "nvme";
    cfg.parallel.offload_params = "nvme";
  }
  // Without --strategy: the config's strategy, or all of them.
  if (strategy.empty()) strategy = config.empty() ? "all" : cfg.parallel.strategy;
  std::vector<std::string> names = {strategy};
  if (strategy == "all") names = braid::parallel::estimated_strategy_names();
  const int ranks = static_cast<int>(world);
  runtime.threads = static_cast<int>(threads);
  const auto estimates = braid::train::estimate_strategies(cfg, ranks, names, runtime);
  std::fputs(braid::train::memory_estimate_table(cfg, ranks, estimates, runtime).c_str(), stdout);
  return 0;
}

}  // namespace

BRAID_COMMAND("estimate-memory", "estimate each rank's memory per category, per strategy",
              run_estimate_memory);
