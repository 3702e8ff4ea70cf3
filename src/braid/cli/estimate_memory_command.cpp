// braid estimate-memory: what each rank would keep, per category, for a model, strategy and
// batch, without running anything (train/memory_estimate_table.h).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "braid/cli/command.h"
#include "braid/cli/command_line.h"
#include "braid/cli/model_option.h"
#include "braid/cli/option_values.h"
#include "braid/config/config.h"
#include "braid/core/error.h"
#include "braid/nn/model_config.h"
#include "braid/train/memory_estimate_table.h"

namespace {

constexpr const char* kDescription =
    "Prints what each rank keeps at its peak, per category (parameters, gradients, optimizer "
    "state, activations, communication, scratch), one row per strategy. Needs --model or "
    "--config; options override the config's values.";

// The command line's values; 0 and "" mean not given (the config's, or the default, then).
struct Request {
  std::string model, config, strategy, sharding, precision, checkpointing, schedule, cp_mode,
      balance;
  int64_t world = 1, micro = 0, seq_len = 0, tp = 0, pp = 0, cp = 0, accumulation = 0, threads = 0,
          virtual_stages = 0;
  bool offload = false, sp = false;
  braid::train::RankRuntime runtime;
};

void add_options(CLI::App& app, Request& q) {
  using braid::cli::integer;
  using braid::cli::one_of;
  app.add_option("--model", q.model,
                 "a preset (gpt2-small, llama-7b, ...), an HF config.json or a directory holding "
                 "one")
      ->type_name("M");
  app.add_option("--config", q.config,
                 "take model, strategy, batch and precision from a braid config")
      ->type_name("FILE");
  app.add_option("--strategy", q.strategy,
                 "all (ddp, zero1, zero2, zero3), none, ddp, zero1, zero2, zero3 or fsdp (default: "
                 "the config's, else all)")
      ->type_name("S")
      ->check(one_of({"all", "none", "ddp", "zero1", "zero2", "zero3", "fsdp"}, "strategy"));
  app.add_option("--sharding-strategy", q.sharding,
                 "fsdp: FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD, HYBRID_SHARD_ZERO2")
      ->type_name("S");
  app.add_option("--world-size", q.world, "ranks")
      ->type_name("N")
      ->transform(integer<int64_t>())
      ->capture_default_str();
  app.add_option("--tp", q.tp, "tensor-parallel ranks per group (default 1)")
      ->type_name("N")
      ->transform(integer<int64_t>());
  app.add_flag("--sp", q.sp,
               "sequence parallelism beside --tp: the residual stream's activations split over "
               "the tp ranks");
  app.add_option("--pp", q.pp,
                 "pipeline stages (default 1; the strategy runs over world-size / (tp x pp) "
                 "ranks, and the row shown is the stage with the largest total)")
      ->type_name("N")
      ->transform(integer<int64_t>());
  app.add_option("--cp", q.cp,
                 "context-parallel ranks per sequence (default 1): each rank holds seq-len / cp "
                 "tokens of every sequence; the strategy reduces and shards over them too")
      ->type_name("N")
      ->transform(integer<int64_t>());
  app.add_option("--cp-mode", q.cp_mode,
                 "ring (default; seq-len a multiple of 2 x cp) or ulysses (heads divisible by cp)")
      ->type_name("M")
      ->check(one_of({"ring", "ulysses"}));
  app.add_option("--pipeline-schedule", q.schedule,
                 "1f1b (default), gpipe, interleaved_1f1b (with --virtual-stages), zb_h1 or zb_v")
      ->type_name("S")
      ->check(one_of({"1f1b", "gpipe", "interleaved_1f1b", "zb_h1", "zb_v"}));
  app.add_option("--virtual-stages", q.virtual_stages,
                 "model chunks per pipeline rank under interleaved_1f1b (default 1)")
      ->type_name("V")
      ->transform(integer<int64_t>());
  app.add_option("--pipeline-balance", q.balance,
                 "uniform (default: the same blocks per stage) or parameters (uneven, balanced by "
                 "parameter count)")
      ->type_name("B")
      ->check(one_of({"uniform", "parameters"}));
  app.add_option("--gradient-accumulation-steps", q.accumulation,
                 "micro-batches per step (default 1): what a pipeline keeps in flight")
      ->type_name("M")
      ->transform(integer<int64_t>());
  app.add_option("--precision", q.precision, "fp32, bf16 or fp16 (default fp32)")
      ->type_name("P")
      ->check(one_of({"fp32", "bf16", "fp16"}));
  app.add_option("--micro-batch-size", q.micro, "sequences per rank per micro-step (default 1)")
      ->type_name("B")
      ->transform(integer<int64_t>());
  app.add_option("--seq-len", q.seq_len, "tokens per sequence (default 1024, at most the model's)")
      ->type_name("T")
      ->transform(integer<int64_t>());
  app.add_option("--activation-checkpointing", q.checkpointing,
                 "none, full or selective (default none)")
      ->type_name("K")
      ->check(one_of({"none", "full", "selective"}));
  app.add_flag("--offload", q.offload, "optimizer state (and for zero3/fsdp parameters) to files");
  app.add_option("--threads", q.threads,
                 "OpenMP threads per rank (default: this machine's cores divided by the ranks, as "
                 "braid launch gives them)")
      ->type_name("N")
      ->transform(integer<int64_t>());
  app.add_option("--backend", q.runtime.backend.kind,
                 "mpi (processes on one node) or local (ranks as threads of one process)")
      ->type_name("B")
      ->check(one_of({"local", "mpi"}))
      ->capture_default_str();
}

// braid's own limits on the values (CLI11 has checked their types).
void check_request(const CLI::App& app, const Request& q) {
  BRAID_CHECK(!q.model.empty() || !q.config.empty(),
              "--model PRESET|config.json or --config FILE is required");
  BRAID_CHECK(q.world >= 1 && q.world <= 1 << 20, "--world-size must be in [1, 1048576], got ",
              q.world);
  BRAID_CHECK(q.tp >= 0 && q.tp <= q.world && (q.tp == 0 || q.world % q.tp == 0), "--tp ", q.tp,
              " must divide --world-size ", q.world);
  const int64_t tp = std::max<int64_t>(q.tp, 1);
  BRAID_CHECK(q.pp >= 0 && (q.pp == 0 || q.world % (q.pp * tp) == 0), "--pp ", q.pp, " x --tp ", tp,
              " must divide --world-size ", q.world);
  const int64_t pp = std::max<int64_t>(q.pp, 1);
  BRAID_CHECK(q.cp >= 0 && (q.cp == 0 || q.world % (q.cp * pp * tp) == 0), "--cp ", q.cp,
              " x --pp ", pp, " x --tp ", tp, " must divide --world-size ", q.world);
  BRAID_CHECK(q.accumulation >= 0, "--gradient-accumulation-steps must be >= 1, got ",
              q.accumulation);
  BRAID_CHECK(q.virtual_stages >= 0, "--virtual-stages must be >= 1, got ", q.virtual_stages);
  BRAID_CHECK(q.micro >= 0, "--micro-batch-size must be >= 1, got ", q.micro);
  BRAID_CHECK(q.seq_len >= 0, "--seq-len must be >= 1, got ", q.seq_len);
  BRAID_CHECK(app.count("--threads") == 0 || (q.threads >= 1 && q.threads <= 1 << 16),
              "--threads must be in [1, 65536], got ", q.threads);
}

// What context parallelism needs of the sequence and the heads (the estimator's errors name the
// config keys; these name the options).
void check_context_split(const braid::config::TrainConfig& cfg, const braid::nn::ModelConfig& mc) {
  const int64_t cp = cfg.parallel.context_parallel_size;
  BRAID_CHECK(cp >= 1, "--cp (parallel.context_parallel_size) must be >= 1, got ", cp);
  if (cp == 1) return;
  const bool ulysses = cfg.parallel.context_parallel_mode == "ulysses";
  const int64_t split = ulysses ? cp : 2 * cp;
  BRAID_CHECK(cfg.data.seq_len % split == 0, "--seq-len ", cfg.data.seq_len,
              " does not split over --cp ", cp,
              ulysses ? " with --cp-mode ulysses: it must divide by it"
                      : " with --cp-mode ring: its zig-zag split needs a multiple of 2 x cp = " +
                            std::to_string(split));
  const int64_t tp = std::max<int64_t>(1, cfg.parallel.tensor_parallel_size);
  const int64_t heads = mc.n_head / tp, kv_heads = mc.n_kv_head / std::min(mc.n_kv_head, tp);
  BRAID_CHECK(!ulysses || (heads % cp == 0 && kv_heads % cp == 0),
              "--cp-mode ulysses splits the attention heads over --cp ", cp, ": the model's ",
              heads, " query and ", kv_heads, " key/value heads", tp > 1 ? " per --tp rank" : "",
              " must both divide by it (ring has no such limit)");
}

int run_estimate_memory(const std::vector<std::string>& args) {
  namespace fs = std::filesystem;
  braid::cli::CommandLine cl("estimate-memory", kDescription);
  Request q;
  add_options(cl.app(), q);
  if (auto status = cl.parse(args)) return *status;
  check_request(cl.app(), q);

  braid::config::TrainConfig cfg;
  if (!q.config.empty()) cfg = braid::config::load_config(q.config);
  if (!q.model.empty()) braid::cli::set_model_option(cfg, q.model);
  if (q.seq_len > 0) cfg.data.seq_len = q.seq_len;
  using braid::nn::ModelConfig;
  const ModelConfig mc =
      !cfg.model.init_from.empty()
          ? ModelConfig::from_hf_file(fs::path(cfg.model.init_from) / "config.json")
      : !cfg.model.config.empty() ? ModelConfig::from_hf_file(cfg.model.config)
                                  : ModelConfig::preset(cfg.model.preset);
  if (!q.model.empty() && q.seq_len == 0) {
    cfg.data.seq_len = std::min<int64_t>(1024, mc.max_seq_len);
  }
  BRAID_CHECK(cfg.data.seq_len <= mc.max_seq_len, "--seq-len ", cfg.data.seq_len,
              " exceeds the model's maximum sequence length ", mc.max_seq_len);
  if (q.micro > 0) cfg.training.micro_batch_size = q.micro;
  if (q.tp > 0) cfg.parallel.tensor_parallel_size = q.tp;
  if (q.pp > 0) cfg.parallel.pipeline_parallel_size = q.pp;
  if (q.cp > 0) cfg.parallel.context_parallel_size = q.cp;
  if (!q.cp_mode.empty()) cfg.parallel.context_parallel_mode = q.cp_mode;
  check_context_split(cfg, mc);
  if (!q.schedule.empty()) cfg.parallel.pipeline_schedule = q.schedule;
  if (q.virtual_stages > 0) cfg.parallel.pipeline_virtual_stages = q.virtual_stages;
  if (!q.balance.empty()) cfg.parallel.pipeline_balance = q.balance;
  if (q.sp) cfg.parallel.sequence_parallel = true;
  BRAID_CHECK(!cfg.parallel.sequence_parallel || cfg.parallel.tensor_parallel_size > 1,
              "--sp (parallel.sequence_parallel) needs --tp 2 or more: sequence parallelism "
              "splits the residual stream over the tensor-parallel ranks");
  if (q.accumulation > 0) cfg.training.gradient_accumulation_steps = q.accumulation;
  if (!q.precision.empty()) cfg.training.precision = q.precision;
  if (!q.checkpointing.empty()) cfg.model.activation_checkpointing = q.checkpointing;
  if (!q.sharding.empty()) cfg.parallel.sharding_strategy = q.sharding;
  if (q.offload) {
    cfg.parallel.offload_optimizer = "nvme";
    cfg.parallel.offload_params = "nvme";
  }
  // Without --strategy: the config's strategy, or all of them.
  std::string strategy = q.strategy;
  if (strategy.empty()) strategy = q.config.empty() ? "all" : cfg.parallel.strategy;
  std::vector<std::string> names = {strategy};
  if (strategy == "all") names = braid::parallel::estimated_strategy_names();
  const int ranks = static_cast<int>(q.world);
  braid::train::RankRuntime runtime = q.runtime;
  runtime.threads = static_cast<int>(q.threads);
  const auto estimates = braid::train::estimate_strategies(cfg, ranks, names, runtime);
  std::fputs(braid::train::memory_estimate_table(cfg, ranks, estimates, runtime).c_str(), stdout);
  return 0;
}

}  // namespace

BRAID_COMMAND("estimate-memory", "estimate each rank's memory per category, per strategy",
              run_estimate_memory);
