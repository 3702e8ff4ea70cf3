// braid bench comm [--min-bytes 4K] [--max-bytes 256M] [--iters N] [--warmup N] [--dtype f32]
//                  [--ops all_reduce,reduce_scatter,...] [--no-raw]
// Run it under the launcher: braid launch -n 4 -- braid bench comm
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "bench/comm_bench.h"
#include "bench/tp_bench.h"
#include "braid/cli/args.h"
#include "braid/cli/command.h"
#include "braid/core/error.h"
#include "braid/train/accelerator.h"

namespace {

// braid bench tp [--preset bench-small] [--batch 4] [--seq-len 256] [--sp] [--steps 3]
int run_tp(const std::vector<std::string>& args) {
  braid::bench::TpBenchOptions o;
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> const std::string& {
      BRAID_CHECK(i + 1 < args.size(), a, " needs a value");
      return args[++i];
    };
    if (a == "--preset") {
      o.preset = value();
    } else if (a == "--batch") {
      o.batch = braid::cli::parse_int32(a, value());
    } else if (a == "--seq-len") {
      o.seq_len = braid::cli::parse_int32(a, value());
    } else if (a == "--steps") {
      o.steps = braid::cli::parse_int32(a, value());
    } else if (a == "--sp") {
      o.sequence_parallel = true;
    } else {
      BRAID_THROW("unknown option '", a, "' (see braid bench --help)");
    }
  }
  BRAID_CHECK(o.batch >= 1 && o.seq_len >= 1 && o.steps >= 1,
              "--batch, --seq-len and --steps must be >= 1");
  return braid::bench::run_tp_bench(braid::train::launched_world(), o, stdout) ? 0 : 1;
}

int run_bench(const std::vector<std::string>& args) {
  bool help = args.empty();
  for (const auto& a : args) help = help || a == "--help" || a == "-h";
  if (help) {
    std::printf(
        "usage: braid bench comm [--min-bytes 4K] [--max-bytes 256M] [--iters 20] "
        "[--warmup 3] [--rounds 3]\n"
        "                        [--dtype f32|bf16|f16|i32|i64] [--ops all_reduce,...] "
        "[--no-raw]\n"
        "Times every collective like nccl-tests, with the raw MPI call beside it.\n"
        "Run it on several ranks: braid launch -n 2 -- braid bench comm\n"
        "       braid bench tp [--preset bench-small] [--batch 4] [--seq-len 256] [--sp] "
        "[--steps 3]\n"
        "Tensor-parallel traffic per micro-step against Megatron's formula (the world is the "
        "tp group).\n");
    return args.empty() ? 2 : 0;
  }
  if (args[0] == "tp") return run_tp(args);
  BRAID_CHECK(args[0] == "comm", "unknown benchmark '", args[0], "' (available: comm, tp)");
  braid::bench::CommBenchOptions o;
  auto value = [&](size_t& i) -> const std::string& {
    BRAID_CHECK(i + 1 < args.size(), args[i], " needs a value");
    return args[++i];
  };
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--min-bytes") {
      o.min_bytes = braid::bench::parse_bytes(value(i));
    } else if (a == "--max-bytes") {
      o.max_bytes = braid::bench::parse_bytes(value(i));
    } else if (a == "--iters") {
      o.iters = braid::cli::parse_int32(a, value(i));
    } else if (a == "--rounds") {
      o.rounds = braid::cli::parse_int32(a, value(i));
    } else if (a == "--warmup") {
      o.warmup = braid::cli::parse_int32(a, value(i));
    } else if (a == "--dtype") {
      o.dtype = braid::dtype_from_name(value(i));
    } else if (a == "--ops") {
      o.ops.clear();
      std::stringstream ss(value(i));
      for (std::string op; std::getline(ss, op, ',');) o.ops.push_back(op);
    } else if (a == "--no-raw") {
      o.raw = false;
    } else {
      BRAID_THROW("unknown option '", a, "' (see braid bench --help)");
    }
  }
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
