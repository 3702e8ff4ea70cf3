// braid bench comm [--min-bytes 4K] [--max-bytes 256M] [--iters N] [--warmup N] [--rounds N]
//                  [--dtype f32] [--ops all_reduce,reduce_scatter,...] [--no-raw]
// braid bench tp [--preset bench-small] [--batch 4] [--seq-len 256] [--sp] [--steps 3]
// Run them under the launcher: braid launch -n 4 -- braid bench comm
#include <cstdio>
#include <string>
#include <vector>

#include "bench/comm_bench.h"
#include "bench/tp_bench.h"
#include "braid/cli/command.h"
#include "braid/cli/command_line.h"
#include "braid/cli/option_values.h"
#include "braid/core/error.h"
#include "braid/train/accelerator.h"

namespace {

using braid::cli::integer;

// A size in bytes, "4096", "4K", "16M" or "1G" (bench::parse_bytes), handed to CLI11 as the
// number of bytes.
CLI::Validator byte_size() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        try {
          text = std::to_string(braid::bench::parse_bytes(text));
          return "";
        } catch (const braid::Error& e) {
          return e.what();
        }
      },
      "");
}

void add_comm_options(CLI::App& comm, braid::bench::CommBenchOptions& o, std::string& dtype,
                      bool& no_raw) {
  comm.add_option("--min-bytes", o.min_bytes, "the smallest message (4096, 4K, 16M, 1G)")
      ->type_name("SIZE")
      ->transform(byte_size())
      ->capture_default_str();
  comm.add_option("--max-bytes", o.max_bytes, "the largest message; sizes double up to it")
      ->type_name("SIZE")
      ->transform(byte_size())
      ->capture_default_str();
  comm.add_option("--iters", o.iters, "timed calls per size (fewer for big sizes)")
      ->type_name("N")
      ->transform(integer<int>())
      ->capture_default_str();
  comm.add_option("--warmup", o.warmup, "untimed calls per size first")
      ->type_name("N")
      ->transform(integer<int>())
      ->capture_default_str();
  comm.add_option("--rounds", o.rounds,
                  "timed rounds per size; the best is reported (the machine may be shared)")
      ->type_name("N")
      ->transform(integer<int>())
      ->capture_default_str();
  comm.add_option("--dtype", dtype, "element type: f32, bf16, f16, i32 or i64")
      ->type_name("T")
      ->capture_default_str();
  // trigger_on_parse: a repeated --ops replaces the list, as one given once does.
  comm.add_option("--ops", o.ops,
                  "the collectives to time, comma-separated (default: all_reduce, "
                  "reduce_scatter, all_gather, broadcast, all_to_all)")
      ->type_name("OPS")
      ->delimiter(',')
      ->trigger_on_parse();
  comm.add_flag("--no-raw", no_raw, "do not time the raw MPI calls");
}

void add_tp_options(CLI::App& tp, braid::bench::TpBenchOptions& o) {
  tp.add_option("--preset", o.preset, "the model preset")->type_name("P")->capture_default_str();
  tp.add_option("--batch", o.batch, "sequences per micro-step")
      ->type_name("B")
      ->transform(integer<int>())
      ->capture_default_str();
  tp.add_option("--seq-len", o.seq_len, "tokens per sequence")
      ->type_name("T")
      ->transform(integer<int>())
      ->capture_default_str();
  tp.add_option("--steps", o.steps, "timed micro-steps, after one warm-up")
      ->type_name("N")
      ->transform(integer<int>())
      ->capture_default_str();
  tp.add_flag("--sp", o.sequence_parallel, "sequence parallelism");
}

int run_bench(const std::vector<std::string>& args) {
  braid::cli::CommandLine cl(
      "bench", "Benchmarks. Run them on several ranks: braid launch -n 2 -- braid bench comm");
  CLI::App& app = cl.app();
  braid::bench::CommBenchOptions comm_options;
  std::string dtype(braid::dtype_name(comm_options.dtype));
  bool no_raw = false;
  CLI::App* comm = app.add_subcommand(
      "comm", "times every collective like nccl-tests, with the raw MPI call beside it");
  add_comm_options(*comm, comm_options, dtype, no_raw);
  braid::bench::TpBenchOptions tp_options;
  CLI::App* tp = app.add_subcommand(
      "tp",
      "tensor-parallel traffic per micro-step against Megatron's formula (the world is the tp "
      "group)");
  add_tp_options(*tp, tp_options);
  cl.require_subcommand("benchmark");
  if (auto status = cl.parse(args)) return *status;

  if (*tp) {
    const auto& o = tp_options;
    BRAID_CHECK(o.batch >= 1 && o.seq_len >= 1 && o.steps >= 1,
                "--batch, --seq-len and --steps must be >= 1");
    return braid::bench::run_tp_bench(braid::train::launched_world(), o, stdout) ? 0 : 1;
  }
  auto& o = comm_options;
  o.dtype = braid::dtype_from_name(dtype);
  o.raw = !no_raw;
  BRAID_CHECK(o.iters >= 1 && o.warmup >= 0 && o.rounds >= 1,
              "--iters and --rounds must be >= 1, --warmup >= 0");
  BRAID_CHECK(o.min_bytes <= o.max_bytes, "--min-bytes ", o.min_bytes, " > --max-bytes ",
              o.max_bytes);
  auto world = braid::train::launched_world();
  braid::bench::run_comm_bench(*world, o, stdout);
  return 0;
}

}  // namespace

BRAID_COMMAND("bench",
              "benchmarks: 'braid bench comm' times the collectives, 'braid bench tp' the "
              "tensor-parallel traffic",
              run_bench);
