// comm_mpi_bench [--min-bytes N] [--max-bytes N] [--iters N] [--rounds N] [--thread-multiple]
// Raw MPI_Allreduce / MPI_Reduce_scatter_block / MPI_Allgather / MPI_Bcast on f32, timed as
// `braid bench comm` times braid (mean of iters calls, best of rounds, slowest rank), printed
// in the same columns.
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

namespace {

double time_calls(int warmup, int iters, int rounds, const std::function<void()>& fn) {
  for (int i = 0; i < warmup; ++i) fn();
  double best = 1e30;
  for (int r = 0; r < rounds; ++r) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int i = 0; i < iters; ++i) fn();
    best = std::min(best, (MPI_Wtime() - t0) / iters);
  }
  double worst = 0;
  MPI_Allreduce(&best, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return worst;
}

}  // namespace

int main(int argc, char** argv) {
  long long min_bytes = 4 << 10, max_bytes = 256ll << 20;
  int iters = 20, rounds = 3;
  bool multiple = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::atoll(argv[++i]) : 0; };
    if (a == "--min-bytes")
      min_bytes = next();
    else if (a == "--max-bytes")
      max_bytes = next();
    else if (a == "--iters")
      iters = static_cast<int>(next());
    else if (a == "--rounds")
      rounds = static_cast<int>(next());
    else if (a == "--thread-multiple")
      multiple = true;
  }
  int provided = 0;
  MPI_Init_thread(&argc, &argv, multiple ? MPI_THREAD_MULTIPLE : MPI_THREAD_SINGLE, &provided);
  int rank = 0, n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  if (rank == 0)
    std::printf(
        "# comm_mpi_bench: %d ranks, f32, %s, iters %d, best of %d rounds\n"
        "# %-15s %9s %11s | %10s %7s %7s\n",
        n, multiple ? "MPI_THREAD_MULTIPLE" : "MPI_THREAD_SINGLE", iters, rounds, "collective",
        "bytes", "count", "time(us)", "algbw", "busbw");
  const char* ops[] = {"all_reduce", "reduce_scatter", "all_gather", "broadcast"};
  for (const char* op : ops) {
    for (long long bytes = min_bytes; bytes <= max_bytes; bytes *= 2) {
      long long count = std::max<long long>(n, bytes / 4 / n * n);
      int it = static_cast<int>(std::clamp<long long>((2ll << 30) / (count * 4), 2, iters));
      std::vector<float> a(count, 1.0f), b(count, 0.0f);
      int c = static_cast<int>(count), part = static_cast<int>(count / n);
      std::function<void()> fn;
      double factor = static_cast<double>(n - 1) / n;
      if (!std::strcmp(op, "all_reduce")) {
        fn = [&] { MPI_Allreduce(MPI_IN_PLACE, a.data(), c, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); };
        factor *= 2;
      } else if (!std::strcmp(op, "reduce_scatter")) {
        fn = [&] {
          MPI_Reduce_scatter_block(a.data(), b.data(), part, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        };
      } else if (!std::strcmp(op, "all_gather")) {
        fn = [&] {
          MPI_Allgather(b.data(), part, MPI_FLOAT, a.data(), part, MPI_FLOAT, MPI_COMM_WORLD);
        };
      } else {
        fn = [&] { MPI_Bcast(a.data(), c, MPI_FLOAT, 0, MPI_COMM_WORLD); };
        factor = 1;
      }
      double t = time_calls(3, it, rounds, fn);
      if (rank == 0)
        std::printf("  %-15s %9lld %11lld | %10.1f %7.2f %7.2f\n", op, count * 4, count, t * 1e6,
                    count * 4 / t / 1e9, count * 4 / t / 1e9 * factor);
      std::fflush(stdout);
    }
  }
  MPI_Finalize();
  return 0;
}
