// braid plan: the layout to train a model with on N ranks, chosen from a calibrated model of
// this machine (parallel/cost/planner.h), with the predicted step time, tokens/s, MFU and memory
// of each; `--explain LAYOUT` for one layout's parts; `--calibrate` measures the machine.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "braid/cli/command.h"
#include "braid/cli/command_line.h"
#include "braid/cli/model_option.h"
#include "braid/cli/option_values.h"
#include "braid/comm/collective_guard.h"
#include "braid/config/config.h"
#include "braid/core/error.h"
#include "braid/core/memory_tracker.h"
#include "braid/parallel/cost/calibrate.h"
#include "braid/parallel/cost/planner.h"
#include "braid/train/trainer.h"

namespace {

namespace cost = braid::parallel::cost;
using braid::cli::integer;

constexpr const char* kDescription =
    "Chooses the layout (data-parallel strategy, tensor and pipeline parallelism, micro-batch, "
    "precision, checkpointing, offload) for a model on N ranks: every layout that fits the "
    "memory budget, ranked by the step time predicted from this machine's profile. Make the "
    "profile first with --calibrate (about a minute).";

struct Request {
  std::string model, config, profile, explain, precision = "any", format = "table", budget;
  std::string disk_dir;
  int64_t world = 1, hosts = 1, seq_len = 0, global_batch = 0, top = 12, max_micro = 0;
  bool calibrate = false, calibrate_network = false, no_offload = false;
  std::vector<int> ranks;
};

void add_options(CLI::App& app, Request& q) {
  using braid::cli::one_of;
  app.add_flag("--calibrate", q.calibrate,
               "measure this machine (GEMM, attention, memory-bound ops, collectives, disk) and "
               "write the profile");
  app.add_flag("--calibrate-network", q.calibrate_network,
               "as the ranks of a job on 2 or more hosts: measure the collectives between the "
               "hosts and add them to the profile (made by --calibrate on one of them first)");
  app.add_option("--profile", q.profile,
                 "the machine profile to read or write (default $BRAID_MACHINE_PROFILE, else "
                 "~/.cache/braid/machine-HOST.json); a spec-sheet profile plans machines braid "
                 "cannot reach (docs/plan.md)")
      ->type_name("FILE");
  app.add_option("--model", q.model, "a preset, an HF config.json or a directory holding one")
      ->type_name("M");
  app.add_option("--config", q.config,
                 "take the model, sequence length, global batch and precision from a braid config")
      ->type_name("FILE");
  app.add_option("--world-size", q.world, "ranks")
      ->type_name("N")
      ->transform(integer<int64_t>())
      ->capture_default_str();
  app.add_option("--hosts", q.hosts, "nodes the ranks are spread over (equally)")
      ->type_name("H")
      ->transform(integer<int64_t>())
      ->capture_default_str();
  app.add_option("--budget", q.budget,
                 "memory per rank, as memory.budget takes it (8GiB, 512MiB, 4GB; default: the "
                 "profile's: node memory / ranks per node, or a GPU's memory)")
      ->type_name("SIZE");
  app.add_option("--seq-len", q.seq_len, "tokens per sequence (default: the config's, else 1024)")
      ->type_name("T")
      ->transform(integer<int64_t>());
  app.add_option("--global-batch", q.global_batch,
                 "sequences per optimizer step (default: the config's, else 8)")
      ->type_name("G")
      ->transform(integer<int64_t>());
  app.add_option("--precision", q.precision,
                 "fp32, bf16 or any (default: any without --config, else the config's)")
      ->type_name("P")
      ->check(one_of({"any", "fp32", "bf16"}));
  app.add_option("--max-micro-batch", q.max_micro, "largest micro-batch to consider")
      ->type_name("B")
      ->transform(integer<int64_t>());
  app.add_flag("--no-offload", q.no_offload, "leave out layouts that offload to files");
  app.add_option("--explain", q.explain,
                 "one layout's predicted step, part by part, e.g. \"zero3 tp2 pp2:1f1b mb2x4 "
                 "bf16 ckpt:full\"")
      ->type_name("LAYOUT");
  app.add_option("--top", q.top, "rows of the ranked table")
      ->type_name("K")
      ->transform(integer<int64_t>())
      ->capture_default_str();
  app.add_option("--format", q.format, "table, or tsv (one line per layout, for scripts)")
      ->type_name("F")
      ->check(one_of({"table", "tsv"}))
      ->capture_default_str();
  app.add_option(
         "--ranks", q.ranks,
         "--calibrate: the counts of ranks per node to measure (default 1, 2, 4, 8 up to the "
         "cores; beyond them a rank gets its share of the cores)")
      ->type_name("N,N")
      ->delimiter(',');
  app.add_option("--disk-dir", q.disk_dir,
                 "--calibrate: where to measure the disk for offload (default: the current "
                 "directory)")
      ->type_name("DIR");
}

std::string ms(double s) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f", s * 1e3);
  return b;
}

std::string gib(double bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f", bytes / (1024.0 * 1024.0 * 1024.0));
  return b;
}

int run_calibrate(const Request& q) {
  cost::CalibrateOptions o;
  o.ranks = q.ranks;
  o.disk_dir = q.disk_dir.empty() ? std::filesystem::current_path().string() : q.disk_dir;
  o.log = [](const std::string& line) { std::fprintf(stderr, "calibrate: %s\n", line.c_str()); };
  const std::string path = q.profile.empty() ? cost::default_profile_path() : q.profile;
  const cost::MachineProfile p = cost::calibrate(o);
  cost::save_profile(p, path);
  std::printf("machine: %s, %d cores, %s memory\n", p.cpu.c_str(), p.cores,
              (gib(double(p.node_memory)) + " GiB").c_str());
  std::printf(
      "| ranks | threads | GEMM f32 GFLOP/s | GEMM bf16 | half dim | stream GB/s | "
      "adamw ns/param |\n|---|---|---|---|---|---|---|\n");
  for (const auto& r : p.compute) {
    std::printf("| %d | %d | %.1f | %.1f | %.0f | %.1f | %.3f |\n", r.ranks, r.threads,
                r.gemm_gflops_f32, r.gemm_gflops_bf16, r.gemm_half_dim, r.stream_gbs,
                r.elementwise_ns.at("adamw"));
  }
  std::printf("\n| collective | ranks | latency us | GB/s |\n|---|---|---|---|\n");
  for (const auto& [op, sizes] : p.node.ops) {
    for (const auto& [g, f] : sizes) {
      std::printf("| %s | %d | %.1f | %.2f |\n", op.c_str(), g, f.latency_us, f.gbs);
    }
  }
  std::printf("\ndisk: write %.2f GB/s, read %.2f GB/s\nwrote %s\n", p.disk_write_gbs,
              p.disk_read_gbs, path.c_str());
  return 0;
}

// Note [Network calibration] (calibrate.h): every rank measures, rank 0 adds the fits to the
// node's profile.
int run_calibrate_network(const Request& q) {
  const std::string path = q.profile.empty() ? cost::default_profile_path() : q.profile;
  auto world = braid::train::launched_world();
  cost::MachineProfile p;
  braid::comm::all_ranks_or_throw(world.get(), [&] {
    if (world->rank() != 0) return;
    BRAID_CHECK(std::filesystem::exists(path), "--calibrate-network: no profile at '", path,
                "': measure a node first (braid plan --calibrate --profile ", path, ")");
    p = cost::load_profile(path);
  });
  auto log = [](const std::string& line) { std::fprintf(stderr, "calibrate: %s\n", line.c_str()); };
  const cost::TransportFits fits = cost::measure_network_collectives(*world, 5, log);
  if (world->rank() != 0) return 0;
  p.network = fits;
  cost::save_profile(p, path);
  std::printf("| collective across hosts | ranks | latency us | GB/s |\n|---|---|---|---|\n");
  for (const auto& [op, sizes] : p.network.ops) {
    for (const auto& [g, f] : sizes)
      std::printf("| %s | %d | %.1f | %.2f |\n", op.c_str(), g, f.latency_us, f.gbs);
  }
  std::printf("\nwrote %s\n", path.c_str());
  return 0;
}

// The request's model, sequence, batch and precisions from --config and the options.
cost::PlanRequest plan_request(const Request& q) {
  BRAID_CHECK(!q.model.empty() || !q.config.empty(),
              "--model PRESET|config.json or --config FILE is required");
  BRAID_CHECK(q.world >= 1 && q.world <= 1 << 20, "--world-size must be in [1, 1048576], got ",
              q.world);
  BRAID_CHECK(q.hosts >= 1 && q.world % q.hosts == 0, "--hosts ", q.hosts,
              " must divide --world-size ", q.world);
  braid::config::TrainConfig cfg;
  if (!q.config.empty()) cfg = braid::config::load_config(q.config);
  if (!q.model.empty()) braid::cli::set_model_option(cfg, q.model);
  cost::PlanRequest r;
  if (q.seq_len > 0) cfg.data.seq_len = q.seq_len;
  // The model as the config has it. model_config_from checks data.seq_len against it; the
  // sequence is checked below instead, naming --seq-len, and a preset's caps its default.
  braid::config::TrainConfig probe = cfg;
  probe.data.seq_len = 1;
  r.model = braid::train::model_config_from(probe);
  if (q.config.empty() && q.seq_len == 0)
    cfg.data.seq_len = std::min<int64_t>(1024, r.model.max_seq_len);
  BRAID_CHECK(cfg.data.seq_len <= r.model.max_seq_len, "--seq-len ", cfg.data.seq_len,
              " exceeds the model's maximum sequence length ", r.model.max_seq_len);
  r.seq_len = cfg.data.seq_len;
  r.world = static_cast<int>(q.world);
  r.hosts = static_cast<int>(q.hosts);
  r.global_batch = q.global_batch > 0                   ? q.global_batch
                   : cfg.training.global_batch_size > 0 ? cfg.training.global_batch_size
                                                        : 8;
  std::string precision = q.precision;
  if (precision == "any" && !q.config.empty()) precision = cfg.training.precision;
  if (precision == "fp32") r.precisions = {braid::DType::f32};
  if (precision == "bf16") r.precisions = {braid::DType::bf16};
  BRAID_CHECK(precision == "any" || precision == "fp32" || precision == "bf16",
              "training.precision '", precision, "': the planner models fp32 and bf16");
  r.offload = !q.no_offload;
  r.max_micro_batch = q.max_micro;
  if (!q.budget.empty()) {
    try {
      r.budget = braid::parse_bytes(q.budget);  // as memory.budget reads it
    } catch (const braid::Error& e) {
      BRAID_THROW("--budget: ", e.what());
    }
  }
  return r;
}

std::string sets(const cost::Layout& L) {
  std::string s;
  for (const auto& [k, v] : L.config_values()) s += (s.empty() ? "" : " ") + k + "=" + v;
  return s;
}

void print_tsv(const cost::Candidate& c) {
  std::printf("%s\t%.3f\t%.1f\t%.4f\t%lld\t%s\t%s\n", c.layout.name().c_str(), c.cost.step * 1e3,
              c.cost.tokens_per_s, c.cost.mfu, static_cast<long long>(c.memory.total()),
              c.fits ? "fits" : "too_big", sets(c.layout).c_str());
}

void print_header(const cost::PlanRequest& r, const cost::MachineProfile& p, int64_t budget) {
  std::printf("machine: %s (%s%s), profile of %s\n", p.name.c_str(),
              p.cpu.empty() ? p.device.c_str() : p.cpu.c_str(),
              p.device == "cpu" ? (", " + std::to_string(p.cores) + " cores").c_str() : "",
              p.calibrated_at.c_str());
  std::printf("model: %s\n", r.model.summary().c_str());
  std::printf(
      "ranks: %d on %d host(s); sequence %lld; global batch %lld; budget %s GiB per "
      "rank\n\n",
      r.world, r.hosts, static_cast<long long>(r.seq_len), static_cast<long long>(r.global_batch),
      gib(double(budget)).c_str());
}

int run_explain(const Request& q, const cost::PlanRequest& r, const cost::MachineProfile& p) {
  const cost::Layout layout = cost::Layout::parse(q.explain);
  // Evaluating checks the layout against the model and the world first.
  const int64_t budget = cost::plan_budget(r, p);
  const cost::Candidate c = cost::evaluate_layout(r, layout, p, budget);
  const int64_t sequences =
      layout.micro_batch * layout.accumulation * (r.world / (layout.tp * layout.pp * layout.cp));
  BRAID_CHECK(sequences == r.global_batch, "layout '", q.explain, "' trains ", sequences,
              " sequences a step, not the global batch of ", r.global_batch,
              " (micro-batch x accumulation x data-parallel ranks)");
  if (q.format == "tsv") {
    print_tsv(c);
    return 0;
  }
  print_header(r, p, budget);
  std::printf("layout: %s\n", c.layout.name().c_str());
  std::printf("predicted step: %s ms, %.0f tokens/s, MFU %.1f%% of %.0f GFLOP/s per rank\n",
              ms(c.cost.step).c_str(), c.cost.tokens_per_s, c.cost.mfu * 100, c.cost.peak_gflops);
  std::printf("\n| part | ms | share |\n|---|---|---|\n");
  for (const auto& [name, s] : c.cost.components()) {
    if (s > 0) {
      std::printf("| %s | %s | %.1f%% |\n", name.c_str(), ms(s).c_str(), 100 * s / c.cost.step);
    }
  }
  std::printf("\ncommunication in all: %s ms (%s ms exposed)\n", ms(c.cost.comm_total).c_str(),
              ms(c.cost.comm_exposed).c_str());
  std::printf("memory per rank: %s GiB of %s GiB (%s)\n", gib(double(c.memory.total())).c_str(),
              gib(double(budget)).c_str(), c.fits ? "fits" : "does not fit");
  std::printf("config: %s\n", sets(c.layout).c_str());
  return 0;
}

int run_plan(const std::vector<std::string>& args) {
  braid::cli::CommandLine cl("plan", kDescription);
  Request q;
  add_options(cl.app(), q);
  if (auto status = cl.parse(args)) return *status;
  BRAID_CHECK(q.top >= 1, "--top must be >= 1, got ", q.top);
  BRAID_CHECK(!(q.calibrate && q.calibrate_network),
              "--calibrate measures one node, --calibrate-network the links between hosts: one "
              "at a time");
  if (q.calibrate) return run_calibrate(q);
  if (q.calibrate_network) return run_calibrate_network(q);

  const cost::PlanRequest r = plan_request(q);
  const std::string path = q.profile.empty() ? cost::default_profile_path() : q.profile;
  const cost::MachineProfile p = cost::load_profile(path);
  if (!q.explain.empty()) return run_explain(q, r, p);

  const cost::PlanResult result = cost::plan_layouts(r, p);
  if (q.format == "tsv") {
    for (const auto& c : result.ranked) print_tsv(c);
    return 0;
  }
  print_header(r, p, result.budget);
  std::printf(
      "| # | layout | step ms | tokens/s | MFU | GiB/rank | gemm | attn | mem | opt | "
      "comm | bubble |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  const size_t rows = std::min<size_t>(result.ranked.size(), static_cast<size_t>(q.top));
  for (size_t i = 0; i < rows; ++i) {
    const auto& c = result.ranked[i];
    std::printf("| %zu | %s | %s | %.0f | %.1f%% | %s | %s | %s | %s | %s | %s | %s |\n", i + 1,
                c.layout.name().c_str(), ms(c.cost.step).c_str(), c.cost.tokens_per_s,
                c.cost.mfu * 100, gib(double(c.memory.total())).c_str(), ms(c.cost.gemm).c_str(),
                ms(c.cost.attention).c_str(),
                ms(c.cost.memory + c.cost.recompute + c.cost.overhead).c_str(),
                ms(c.cost.optimizer + c.cost.offload).c_str(), ms(c.cost.comm_exposed).c_str(),
                ms(c.cost.bubble).c_str());
  }
  std::printf("\n%zu layouts considered, %zu fit.\n%s", result.considered(), result.ranked.size(),
              cost::explain_choice(result).c_str());
  if (!result.ranked.empty()) {
    std::printf("config: %s\n", sets(result.ranked.front().layout).c_str());
  }
  return result.ranked.empty() ? 1 : 0;
}

}  // namespace

BRAID_COMMAND("plan",
              "choose the parallel layout from a calibrated model of this machine; --calibrate "
              "measures it",
              run_plan);
