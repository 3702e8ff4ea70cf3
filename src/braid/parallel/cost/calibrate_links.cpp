// Calibration's links and disk (Note [Calibration], calibrate.h): collectives over ranks as
// threads of a local group, fitted as latency + bytes / bandwidth, and the offload disk.
#include <fcntl.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "braid/comm/local/local_group.h"
#include "braid/core/error.h"
#include "braid/core/tensor.h"
#include "braid/parallel/cost/calibrate.h"

namespace braid::parallel::cost {

namespace {

using Clock = std::chrono::steady_clock;

// Seconds per call of fn: one warm-up, then the median of reps (a collective's ranks wait for
// each other, so every rank's calls line up by themselves).
double time_call(const std::function<void()>& fn, int reps) {
  fn();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = Clock::now();
    fn();
    t.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// One collective's seconds per call at `bytes` on every rank of `group` (the slowest rank's).
double time_collective(comm::ProcessGroup& g, const std::string& op, int64_t bytes, int reps) {
  const int n = g.size(), r = g.rank();
  const int64_t elems = std::max<int64_t>(n, bytes / 4 / n * n);
  Tensor whole = Tensor::zeros({elems}), part = Tensor::zeros({elems / n});
  auto call = [&] {
    if (op == "all_reduce") {
      g.all_reduce(whole)->wait();
    } else if (op == "reduce_scatter") {
      g.reduce_scatter(part, whole)->wait();
    } else if (op == "all_gather") {
      g.all_gather(whole, part)->wait();
    } else if (op == "broadcast") {
      g.broadcast(whole, 0)->wait();
    } else if (r == 0) {
      g.send(whole, 1)->wait();
    } else if (r == 1) {
      g.recv(whole, 0)->wait();
    }
  };
  g.barrier()->wait();
  const double t = time_call(call, reps);
  // The slowest rank's time is the collective's.
  Tensor mine = Tensor::full({1}, t);
  g.all_reduce(mine, comm::ReduceOp::max)->wait();
  return mine.data<float>()[0];
}

// Every collective calibration measures, at these sizes (one rank's buffer).
const std::vector<std::string> kOps = {"all_reduce", "reduce_scatter", "all_gather", "broadcast",
                                       "send_recv"};
const std::vector<double> kBytes = {64 << 10, 1 << 20, 8 << 20, 32 << 20};

// Each op of kOps (send/recv between ranks 0 and 1 where `send_recv`) timed over g at kBytes and
// fitted; collective over g, the same fits on every rank.
std::map<std::string, LinkFit> fit_collectives(comm::ProcessGroup& g, int reps, bool send_recv) {
  std::map<std::string, LinkFit> fits;
  for (const std::string& op : kOps) {
    if (op == "send_recv" && !send_recv) continue;
    std::vector<double> secs;
    for (double b : kBytes) secs.push_back(time_collective(g, op, static_cast<int64_t>(b), reps));
    fits[op] = fit_link(kBytes, secs);
  }
  return fits;
}

}  // namespace

TransportFits measure_node_collectives(const std::vector<int>& sizes, int cores, int reps,
                                       const std::function<void(const std::string&)>& log) {
  TransportFits fits;
  for (int size : sizes) {
    if (log) log("collectives over " + std::to_string(size) + " ranks");
    comm::ProcessGroupOptions o;
    o.name = "calibrate";
    o.timeout = std::chrono::seconds(300);
    auto groups = comm::LocalGroup::create(size, o);
    run_rank_threads(size, [&](int i) {
      omp_set_num_threads(std::max(1, cores / size));
      auto mine = fit_collectives(*groups[i], reps, /*send_recv=*/true);
      if (i == 0) {
        for (auto& [op, f] : mine) fits.ops[op][size] = f;
      }
    });
  }
  return fits;
}

TransportFits measure_network_collectives(comm::ProcessGroup& world, int reps,
                                          const std::function<void(const std::string&)>& log) {
  const std::vector<int> host_of = world.host_of_ranks();
  std::vector<int> leaders;  // the first rank on each host
  for (int r = 0; r < static_cast<int>(host_of.size()); ++r) {
    if (static_cast<int>(leaders.size()) == host_of[static_cast<size_t>(r)]) leaders.push_back(r);
  }
  BRAID_CHECK(leaders.size() >= 2, "calibrate-network: the ", world.size(),
              " rank(s) of this job are on one host: launch it with ranks on 2 or more hosts "
              "(braid launch --hostfile, mpirun, srun)");
  const std::shared_ptr<comm::ProcessGroup> across = world.split(leaders, "calibrate-network");
  TransportFits fits;
  auto measure = [&](comm::ProcessGroup& g, bool send_recv) {
    if (log && world.rank() == 0)
      log("collectives over " + std::to_string(g.size()) + " ranks on " +
          std::to_string(leaders.size()) + " hosts");
    for (auto& [op, f] : fit_collectives(g, reps, send_recv)) fits.ops[op][g.size()] = f;
  };
  if (across) measure(*across, /*send_recv=*/true);  // the leaders alone; the others wait
  world.barrier()->wait();
  // The whole job where a host holds several ranks; send/recv between ranks 0 and 1 would stay
  // on one host there.
  if (static_cast<int>(leaders.size()) < world.size()) measure(world, /*send_recv=*/false);
  return fits;
}

// Write then read back a 256 MiB file, the page cache dropped for it in between.
// The disk as the offload file uses it (parallel/zero/offload_file.h): O_DIRECT transfers of
// 8 MiB into a file already allocated, no fsync (the file is scratch); buffered where the file
// system refuses O_DIRECT, as the offload file falls back. First the file is written once (block
// allocation, which an offload file pays once at start), then overwritten and read back, timed.
void measure_disk(const std::string& dir, MachineProfile& p) {
  namespace fs = std::filesystem;
  const fs::path path = fs::path(dir) / ".braid-calibrate.tmp";
  const size_t chunk = 8 << 20, total = size_t{256} << 20;
  std::unique_ptr<char, decltype(&std::free)> buf(
      static_cast<char*>(std::aligned_alloc(4096, chunk)), &std::free);
  BRAID_CHECK(buf, "calibrate: cannot allocate the disk test's buffer");
  std::memset(buf.get(), 1, chunk);
  int fd = ::open(path.c_str(), O_CREAT | O_TRUNC | O_RDWR | O_DIRECT, 0600);
  if (fd < 0) fd = ::open(path.c_str(), O_CREAT | O_TRUNC | O_RDWR, 0600);
  BRAID_CHECK(fd >= 0, "calibrate: cannot create '", path.string(), "' for the disk test");
  auto fail = [&](const char* what) {
    ::close(fd);
    fs::remove(path);
    BRAID_THROW("calibrate: ", what, " '", path.string(), "' failed");
  };
  // One pass over the file: seconds, or a failure.
  auto pass = [&](bool write) {
    const auto t0 = Clock::now();
    for (size_t done = 0; done < total; done += chunk) {
      const ssize_t n = write ? ::pwrite(fd, buf.get(), chunk, static_cast<off_t>(done))
                              : ::pread(fd, buf.get(), chunk, static_cast<off_t>(done));
      if (n != static_cast<ssize_t>(chunk)) fail(write ? "writing" : "reading");
    }
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
  pass(/*write=*/true);  // allocation
  if (::fsync(fd) != 0) fail("fsync of");
  const double w = pass(/*write=*/true);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);  // buffered only: O_DIRECT bypasses the cache
  const double r = pass(/*write=*/false);
  ::close(fd);
  fs::remove(path);
  p.disk_write_gbs = double(total) / w / 1e9;
  p.disk_read_gbs = double(total) / r / 1e9;
}

void run_rank_threads(int n, const std::function<void(int)>& fn,
                      const std::function<void()>& on_error) {
  std::vector<std::exception_ptr> errors(n);
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      try {
        fn(i);
      } catch (...) {
        errors[i] = std::current_exception();
        if (on_error) on_error();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

LinkFit fit_link(const std::vector<double>& bytes, const std::vector<double>& seconds) {
  BRAID_CHECK(bytes.size() == seconds.size() && bytes.size() >= 2, "fit_link: needs 2+ points");
  // Weighted by 1 / t^2: relative errors count, so small messages fit as well as large ones.
  double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    const double w = 1 / (seconds[i] * seconds[i]);
    sw += w;
    sx += w * bytes[i];
    sy += w * seconds[i];
    sxx += w * bytes[i] * bytes[i];
    sxy += w * bytes[i] * seconds[i];
  }
  const double slope = (sw * sxy - sx * sy) / (sw * sxx - sx * sx);
  double intercept = (sy - slope * sx) / sw;
  LinkFit f;
  // The smallest message's time bounds the latency: a fit below zero is noise.
  intercept = std::clamp(intercept, 0.0, *std::min_element(seconds.begin(), seconds.end()));
  f.latency_us = intercept * 1e6;
  f.gbs = slope > 0 ? 1e-9 / slope : 1e3;
  return f;
}

}  // namespace braid::parallel::cost
