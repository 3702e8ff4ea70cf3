#include "bench/comm_bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "braid/comm/mpi/raw_mpi.h"
#include "braid/core/error.h"

namespace braid::bench {

namespace {

using Clock = std::chrono::steady_clock;

// nccl-tests' bus bandwidth factors: what each link must carry relative to the buffer size.
double bus_factor(const std::string& op, int n) {
  if (op == "all_reduce") return 2.0 * (n - 1) / n;
  if (op == "broadcast") return 1.0;
  return static_cast<double>(n - 1) / n;
}

std::string human(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB"};
  int u = 0;
  double v = static_cast<double>(bytes);
  while (v >= 1024 && u < 3) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, v == std::floor(v) ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

// Seconds per call of each of fns (braid's call, then raw MPI's where there is one), the slowest
// rank's, after warm-up: the mean of `iters` calls, and the best of `rounds` such means (a shared
// machine's other load only ever adds time). The rounds alternate between the calls, so a second
// when the machine runs slow falls on both (timed one after the other, the project's VM, whose
// speed swings up to 2x, put either side ahead by chance). A later call that throws
// CommError (raw MPI with no bf16 sum: the same on every rank) gets no time: -1, and its error in
// `errors`; braid's own call failing fails the bench.
std::vector<double> time_calls(comm::ProcessGroup& g, int warmup, int iters, int rounds,
                               const std::vector<std::function<void()>>& fns,
                               std::vector<std::string>& errors) {
  std::vector<double> secs(fns.size(), 1e30);
  errors.assign(fns.size(), "");
  auto timed = [&](size_t f, int calls) {
    if (!errors[f].empty()) return;
    try {
      g.barrier()->wait();
      auto t0 = Clock::now();
      for (int i = 0; i < calls; ++i) fns[f]();
      if (calls > 0)
        secs[f] =
            std::min(secs[f], std::chrono::duration<double>(Clock::now() - t0).count() / calls);
    } catch (const CommError& e) {
      if (f == 0) throw;  // braid's own call failing is the bench failing
      errors[f] = e.what();
    }
  };
  for (size_t f = 0; f < fns.size(); ++f) timed(f, warmup);
  for (int r = 0; r < rounds; ++r)
    for (size_t f = 0; f < fns.size(); ++f) timed(f, iters);
  Tensor t = Tensor::from_vector(std::vector<float>(secs.begin(), secs.end()),
                                 Shape{static_cast<int64_t>(secs.size())});
  g.all_reduce(t, comm::ReduceOp::max)->wait();
  std::vector<double> out(fns.size());
  for (size_t f = 0; f < fns.size(); ++f)
    out[f] = errors[f].empty() ? static_cast<double>(t.data<float>()[f]) : -1;
  return out;
}

}  // namespace

int64_t parse_bytes(const std::string& text) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    BRAID_THROW("size '", text, "' is not a number (examples: 4096, 4K, 16M, 1G)");
  }
  std::string unit = text.substr(used);
  int64_t mult = 1;
  if (unit == "K" || unit == "KiB" || unit == "k")
    mult = 1 << 10;
  else if (unit == "M" || unit == "MiB")
    mult = 1 << 20;
  else if (unit == "G" || unit == "GiB")
    mult = 1 << 30;
  else
    BRAID_CHECK(unit.empty() || unit == "B", "size '", text, "': unknown unit '", unit, "'");
  BRAID_CHECK(v >= 0, "size '", text, "' is negative");
  return static_cast<int64_t>(v * mult);
}

void run_comm_bench(comm::ProcessGroup& g, const CommBenchOptions& o, FILE* out) {
  const int n = g.size();
  const size_t es = dtype_size(o.dtype);
  auto raw = o.raw ? comm::RawMpi::create(g) : nullptr;
  const bool print = g.rank() == 0;
  if (print) {
    std::fprintf(out,
                 "# braid bench comm: %d ranks, backend %s, dtype %s, iters %d (fewer where a "
                 "round would move over 2 GiB), warmup %d\n"
                 "# time: per call, slowest rank, best of %d rounds; algbw = size / time; busbw = "
                 "algbw x 2(n-1)/n "
                 "(all_reduce), (n-1)/n (reduce_scatter, all_gather, all_to_all), 1 (broadcast)\n"
                 "# size: the full buffer (reduce_scatter input, all_gather output); "
                 "GB/s = 1e9 bytes/s\n#\n",
                 n, g.backend().c_str(), std::string(dtype_name(o.dtype)).c_str(), o.iters,
                 o.warmup, o.rounds);
    std::fprintf(out, "# %-15s %9s %11s %5s | %10s %7s %7s | %10s %7s %7s | %7s\n", "", "", "", "",
                 "braid", "", "", raw ? "raw MPI" : "", "", "", "");
    std::fprintf(out, "# %-15s %9s %11s %5s | %10s %7s %7s | %10s %7s %7s | %7s\n", "collective",
                 "size", "count", "type", "time(us)", "algbw", "busbw", "time(us)", "algbw",
                 "busbw", "speedup");
  }
  for (const std::string& op : o.ops) {
    for (int64_t bytes = std::max<int64_t>(o.min_bytes, es); bytes <= o.max_bytes; bytes *= 2) {
      // Counts divisible by n so the raw MPI calls (equal blocks only) move the same data.
      const int64_t count = std::max<int64_t>(n, bytes / static_cast<int64_t>(es) / n * n);
      const int64_t real_bytes = count * static_cast<int64_t>(es);
      const int iters = static_cast<int>(
          std::clamp<int64_t>((int64_t{2} << 30) / std::max<int64_t>(real_bytes, 1), 2, o.iters));
      Tensor full = Tensor::zeros(Shape{count}, o.dtype);
      Tensor part = Tensor::zeros(Shape{count / n}, o.dtype);
      Tensor other = Tensor::zeros(Shape{count}, o.dtype);
      std::function<void()> braid_fn, raw_fn;
      if (op == "all_reduce") {
        braid_fn = [&] { g.all_reduce(full)->wait(); };
        if (raw) raw_fn = [&] { raw->all_reduce(full); };
      } else if (op == "reduce_scatter") {
        braid_fn = [&] { g.reduce_scatter(part, full)->wait(); };
        if (raw) raw_fn = [&] { raw->reduce_scatter(part, full); };
      } else if (op == "all_gather") {
        braid_fn = [&] { g.all_gather(full, part)->wait(); };
        if (raw) raw_fn = [&] { raw->all_gather(full, part); };
      } else if (op == "broadcast") {
        braid_fn = [&] { g.broadcast(full, 0)->wait(); };
        if (raw) raw_fn = [&] { raw->broadcast(full, 0); };
      } else if (op == "all_to_all") {
        braid_fn = [&] { g.all_to_all(other, full)->wait(); };
        if (raw) raw_fn = [&] { raw->all_to_all(other, full); };
      } else {
        BRAID_THROW("unknown collective '", op,
                    "' (all_reduce, reduce_scatter, all_gather, broadcast, all_to_all)");
      }
      if (o.check && op == "all_reduce") {
        full.fill_(g.rank() + 1);
        g.all_reduce(full)->wait();
        float want = n * (n + 1) / 2.0f;
        BRAID_CHECK(full.to(DType::f32).data<float>()[count - 1] == want,
                    "bench check: all_reduce of ", count, " elements gave ",
                    full.to(DType::f32).data<float>()[count - 1], ", expected ", want);
        full.zero_();
      }
      std::vector<std::function<void()>> fns{braid_fn};
      if (raw_fn) fns.push_back(raw_fn);
      std::vector<std::string> errors;
      const std::vector<double> times = time_calls(g, o.warmup, iters, o.rounds, fns, errors);
      const double t = times[0];
      const double t_raw = raw_fn ? times[1] : -1;
      if (!print) continue;
      const double algbw = real_bytes / t / 1e9, busbw = algbw * bus_factor(op, n);
      std::fprintf(out, "  %-15s %9s %11lld %5s | %10.1f %7.2f %7.2f |", op.c_str(),
                   human(real_bytes).c_str(), static_cast<long long>(count),
                   std::string(dtype_name(o.dtype)).c_str(), t * 1e6, algbw, busbw);
      if (t_raw > 0) {
        const double ralg = real_bytes / t_raw / 1e9;
        std::fprintf(out, " %10.1f %7.2f %7.2f | %6.2fx\n", t_raw * 1e6, ralg,
                     ralg * bus_factor(op, n), t_raw / t);
      } else {
        std::fprintf(out, " %10s %7s %7s | %7s\n", "n/a", "", "", "");
      }
      std::fflush(out);
    }
  }
}

}  // namespace braid::bench
