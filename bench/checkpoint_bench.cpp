// Training checkpoints: save and load throughput beside raw sequential write and read of the
// same bytes on the same disk, and the training time an async save hides.
//
//   braid launch -n 2 -- build/release/bench/checkpoint_bench [--preset gpt2-small]
//       [--strategy zero1] [--dir /tmp/braid_checkpoint_bench] [--rounds 5]
//       [--train-preset bench-small]
//       [--train-steps 12] [--interval 2] [--warm-gib 6]
//
// Part 1, on --preset's model with AdamW (params + 2 states, f32) under --strategy, trained one
// step, each round (after Note [Fresh machine]'s warm-up; odd rounds braid first, even rounds
// raw first):
//   save   Trainer::save_checkpoint (every rank writes its file, CRC-32C, fsync, manifest,
//          rename, `latest`), then the files are dropped from the page cache;
//   write  every rank writes as many bytes as its checkpoint file into a new file, 64 MiB
//          write(2)s from one buffer, fsync, and deletes the previous round's (as the save
//          prunes the previous step): the disk's sequential write speed;
//   load   a Trainer that resumes from the checkpoint (read the weights each rank keeps and its
//          optimizer state, checking each block's CRC-32C as it is read), cold page cache, in a
//          heap handed back to the system first, as a new process's (Note [Fresh heap]);
//   read   every rank reads its own checkpoint file, cold page cache, three ways: buffered
//          read(2)s of 64 MiB, of 8 MiB, and O_DIRECT ones of 64 MiB (where allowed); the load
//          is compared with the fastest.
// GB/s = checkpoint bytes (all ranks) / wall time between barriers; best round and median. CPU
// busy: the share of the machine's CPU time spent working during the best round (/proc/stat).
// Each rank's bytes read by the load (the last round's) are printed below the table.
// Part 2, on --train-preset: --train-steps steps saving every --interval steps with no
// checkpoints, blocking saves and checkpoint.async; the run's wall time and the time training
// waited for saves (--train-steps 0: no part 2). Rank 0 prints.
#include <fcntl.h>
#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "braid/checkpoint/checkpoint_dir.h"
#include "braid/checkpoint/checkpoint_reader.h"
#include "braid/comm/gather_strings.h"
#include "braid/comm/world.h"
#include "braid/core/error.h"
#include "braid/core/tensor.h"
#include "braid/launch/process_setup.h"
#include "braid/train/trainer.h"

using namespace braid;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

struct Options {
  std::string preset = "gpt2-small";
  std::string strategy = "zero1";
  fs::path dir = "/tmp/braid_checkpoint_bench";
  int rounds = 5;
  std::string train_preset = "bench-small";
  int64_t train_steps = 12;
  int64_t interval = 2;
  int64_t warm_gib = 6;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    BRAID_CHECK(i + 1 < argc, a, " needs a value");
    const std::string v = argv[++i];
    if (a == "--preset")
      o.preset = v;
    else if (a == "--strategy")
      o.strategy = v;
    else if (a == "--dir")
      o.dir = v;
    else if (a == "--rounds")
      o.rounds = std::stoi(v);
    else if (a == "--train-preset")
      o.train_preset = v;
    else if (a == "--train-steps")
      o.train_steps = std::stoll(v);
    else if (a == "--interval")
      o.interval = std::stoll(v);
    else if (a == "--warm-gib")
      o.warm_gib = std::stoll(v);
    else
      BRAID_THROW("unknown option '", a, "'");
  }
  return o;
}

config::TrainConfig config(const std::string& preset, const std::string& strategy, int ranks,
                           const fs::path& checkpoints) {
  config::TrainConfig c;
  c.model.preset = preset;
  c.data.random_tokens = true;
  c.data.seq_len = 128;
  c.training.micro_batch_size = 2;
  c.training.gradient_accumulation_steps = 1;
  c.training.global_batch_size = 2 * ranks;
  c.training.max_steps = 1;
  c.training.log_interval = 0;
  c.training.eval_interval = 0;
  c.training.eval_batches = 0;
  c.parallel.strategy = strategy;
  c.output.export_model = false;
  c.output.samples = 0;
  c.checkpoint.dir = checkpoints.string();
  c.checkpoint.keep_last = 1;
  c.training.resume = "never";
  return c;
}

train::TrainerOptions quiet() {
  train::TrainerOptions o;
  o.quiet = true;
  o.measure_peak = false;
  return o;
}

// Drops every file under dir from the page cache (clean pages: the files were fsynced).
void drop_cache(const fs::path& dir) {
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    const int fd = ::open(e.path().c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    ::fdatasync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

constexpr size_t kBlock = size_t{64} << 20;

void raw_write(const fs::path& path, int64_t bytes, const char* block) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  BRAID_CHECK(fd >= 0, "cannot create ", path.string(), ": ", std::strerror(errno));
  for (int64_t left = bytes; left > 0;) {
    const size_t n = static_cast<size_t>(std::min<int64_t>(left, static_cast<int64_t>(kBlock)));
    const ssize_t w = ::write(fd, block, n);
    BRAID_CHECK(w > 0, "writing ", path.string(), ": ", std::strerror(errno));
    left -= w;
  }
  BRAID_CHECK(::fsync(fd) == 0, "fsync ", path.string(), ": ", std::strerror(errno));
  ::close(fd);
}

// How the raw read reads: buffered read(2)s of 64 MiB (all this bench timed before 2026-11-28) or
// of 8 MiB, or O_DIRECT read(2)s of 64 MiB past the page cache, where the filesystem allows it.
// On the project's VM the three took about as long for 2 ranks at once (0.46-0.53 s for 0.75 GB
// each), the direct one with the CPU idle (busy 0-1% against 10-19%). The load is compared with
// the fastest.
struct RawRead {
  const char* name;  // the table's row
  size_t request;    // bytes a read(2) asks for
  bool direct;
};
constexpr RawRead kRawReads[] = {
    {"raw sequential read, 64 MiB read(2)s, same bytes, cold cache", kBlock, false},
    {"raw sequential read, 8 MiB read(2)s", size_t{8} << 20, false},
    {"raw sequential read, O_DIRECT 64 MiB read(2)s", kBlock, true},
};

// Into block (kBlock bytes, aligned for O_DIRECT); false where the filesystem refuses O_DIRECT
// (the row is left out).
bool raw_read(const fs::path& path, char* block, const RawRead& how) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | (how.direct ? O_DIRECT : 0));
  if (fd < 0 && how.direct && errno == EINVAL) return false;
  BRAID_CHECK(fd >= 0, "cannot open ", path.string(), ": ", std::strerror(errno));
  while (true) {
    const ssize_t r = ::read(fd, block, how.request);
    if (r < 0 && how.direct && errno == EINVAL) {
      ::close(fd);
      return false;
    }
    BRAID_CHECK(r >= 0, "reading ", path.string(), ": ", std::strerror(errno));
    if (r == 0) break;
  }
  ::close(fd);
  return true;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The machine's CPU time so far (/proc/stat, in ticks): busy (user, nice, system, irq,
// softirq, steal) and all (busy, idle and iowait). The bench's ranks share one machine, so
// the busy share of an interval is how much of its cores they (and the kernel on their behalf)
// kept working: whether a load that takes longer than the raw read was short of CPU or waiting
// (on the project's VM, 2026-11-27: the raw read 24-35% busy, the load 43-55%; docs/benchmarks.md
// "Training checkpoints").
struct CpuTicks {
  long long busy = 0, all = 0;
};
CpuTicks cpu_ticks() {
  CpuTicks t;
  std::FILE* f = std::fopen("/proc/stat", "r");
  if (!f) return t;
  long long v[8] = {};
  if (std::fscanf(f, "cpu %lld %lld %lld %lld %lld %lld %lld %lld", v, v + 1, v + 2, v + 3, v + 4,
                  v + 5, v + 6, v + 7) == 8) {
    t.busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7];
    t.all = t.busy + v[3] + v[4];
  }
  std::fclose(f);
  return t;
}

struct Timing {
  double s = 0;     // on the slowest rank
  double busy = 0;  // share of the machine's CPU time busy meanwhile
};

std::vector<double> seconds(const std::vector<Timing>& t) {
  std::vector<double> s;
  for (const Timing& x : t) s.push_back(x.s);
  return s;
}

// fn timed between barriers before and after.
template <class Fn>
Timing timed(comm::ProcessGroup* world, Fn&& fn) {
  if (world) world->barrier()->wait();
  const auto t0 = Clock::now();
  const CpuTicks c0 = cpu_ticks();
  fn();
  if (world) world->barrier()->wait();
  const CpuTicks c1 = cpu_ticks();
  const long long all = c1.all - c0.all;
  return {std::chrono::duration<double>(Clock::now() - t0).count(),
          all > 0 ? static_cast<double>(c1.busy - c0.busy) / static_cast<double>(all) : 0.0};
}

// Note [Fresh machine]: a virtual machine's host backs guest memory on its first touch, which
// costs about 5x a page fault on memory touched before (measured here: 750 MB memcpy'd into
// fresh pages 0.47 s, into the same pages again 0.075 s). Page-cache pages are guest memory too,
// so on a freshly booted machine whatever writes first pays for it (saves measured 3-4x slower
// than the raw write that came after them). Every rank touches and frees --warm-gib GiB first, as
// a machine that has been running a while has.
//
// Note [Fresh heap]: a load here runs in a process that has trained and saved, whose freed memory
// stays in its heap (launch::tune_allocator's trim threshold), so allocations that come from the
// heap (below Storage::kLargeHostFrom) would find their pages faulted in already; a resume is a
// new process and finds none. The heap is handed back (malloc_trim) before each timed load.
void warm_memory(int64_t gib) {
  const size_t n = static_cast<size_t>(gib) << 30;
  if (n == 0) return;
  void* p = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  BRAID_CHECK(p != MAP_FAILED, "--warm-gib ", gib, ": mmap failed: ", std::strerror(errno));
  std::memset(p, 1, n);
  ::munmap(p, n);
}

void throughput(const Options& o, const std::shared_ptr<comm::ProcessGroup>& world) {
  const int rank = world ? world->rank() : 0, ranks = world ? world->size() : 1;
  const fs::path ckpt = o.dir / "checkpoints", raw = o.dir / "raw";
  if (rank == 0) {
    fs::remove_all(o.dir);
    fs::create_directories(raw);
  }
  warm_memory(o.warm_gib);
  if (world) world->barrier()->wait();
  // The raw write's and read's buffer: an allocation this large is its own mapping of huge
  // pages, 2 MiB-aligned (Note [Large host allocations], core/storage.cpp), as O_DIRECT wants;
  // filled, so no page faults are timed.
  Tensor buffer = Tensor::full(Shape{static_cast<int64_t>(kBlock)}, 1.0, DType::u8);
  char* block = static_cast<char*>(buffer.raw_data());
  std::vector<Timing> save, write, load;
  std::vector<std::vector<Timing>> read(std::size(kRawReads));
  int64_t bytes = 0, mine = 0, loaded = 0;
  std::string layout;
  for (int round = 1; round <= o.rounds; ++round) {
    // Odd rounds time braid first, even rounds the raw I/O first: the disk's own variation
    // (a virtual disk's host cache, freed blocks being discarded) falls on both alike.
    const bool braid_first = round % 2 == 1;
    config::TrainConfig c = config(o.preset, o.strategy, ranks, ckpt);
    const fs::path step = ckpt / checkpoint::step_dir_name(round);
    // A new file each round, the previous round's deleted after it, as a save writes a new step
    // directory and prunes the old one (keep_last 1): both allocate fresh blocks.
    auto raw_name = [&](int r) {
      return raw / ("rank-" + std::to_string(rank) + "-round-" + std::to_string(r) + ".raw");
    };
    const fs::path raw_file = raw_name(round);
    {
      train::Trainer t(c, world, quiet());
      t.run();  // one step: the state is a trained model's, every page of it touched
      layout = t.accelerator().describe();
      // The raw file has as many bytes as this rank's checkpoint file (the first round's).
      auto do_save = [&] { save.push_back(timed(world.get(), [&] { t.save_checkpoint(round); })); };
      auto do_write = [&] {
        if (bytes == 0) return;
        write.push_back(timed(world.get(), [&] {
          raw_write(raw_file, mine, block);
          fs::remove(raw_name(round - 1));
        }));
      };
      if (braid_first || bytes == 0) {
        do_save();
        bytes = checkpoint::CheckpointReader(step).manifest().total_bytes();
        mine = static_cast<int64_t>(fs::file_size(step / checkpoint::rank_file_name(rank)));
        do_write();
      } else {
        do_write();
        do_save();
      }
    }
    // Each timed read starts from a cold page cache.
    auto cold = [&] {
      if (rank == 0) drop_cache(o.dir);
      if (world) world->barrier()->wait();
    };
    c.training.resume = step.string();
    c.training.max_steps = round;  // the checkpoint's step: nothing left to train
    auto do_load = [&] {
      cold();
      ::malloc_trim(0);  // Note [Fresh heap]
      load.push_back(timed(world.get(), [&] {
        train::Trainer t(c, world, quiet());
        loaded = t.checkpoint_bytes_read();
      }));
    };
    // The raw read reads the rank's own checkpoint file: the same bytes in the same disk blocks
    // (a file written apart from them may lie elsewhere in the host's cache), each way in turn.
    auto do_read = [&] {
      for (size_t i = 0; i < std::size(kRawReads); ++i) {
        cold();
        bool done = true;
        const Timing t = timed(world.get(), [&] {
          done = raw_read(step / checkpoint::rank_file_name(rank), block, kRawReads[i]);
        });
        if (done) read[i].push_back(t);
      }
    };
    if (braid_first) {
      do_load();
      do_read();
    } else {
      do_read();
      do_load();
    }
  }
  const std::vector<std::string> per_rank =
      comm::all_gather_strings(world.get(), std::to_string(loaded));
  if (rank != 0) return;
  const double gb = static_cast<double>(bytes) / 1e9;
  std::printf("checkpoint of %s, %s on %d rank(s): %.3f GB (params + AdamW state, f32)\n",
              o.preset.c_str(), layout.c_str(), ranks, gb);
  std::printf(
      "| | best s | GB/s (best) | GB/s (median of %d) | CPU busy (best) | every round, s |\n"
      "|---|---|---|---|---|---|\n",
      o.rounds);
  auto row = [&](const char* name, const std::vector<Timing>& t) {
    const Timing best = *std::min_element(
        t.begin(), t.end(), [](const Timing& a, const Timing& b) { return a.s < b.s; });
    std::string all;
    for (const Timing& x : t) all += (all.empty() ? "" : " ") + std::to_string(x.s).substr(0, 5);
    std::printf("| %s | %.3f | %.2f | %.2f | %.0f%% | %s |\n", name, best.s, gb / best.s,
                gb / median(seconds(t)), 100 * best.busy, all.c_str());
  };
  row("braid save (CRC-32C, fsync, manifest, rename)", save);
  row("raw sequential write + fsync, same bytes", write);
  row("braid load (Trainer resume: read, check CRCs, materialise), cold cache", load);
  double fastest = 1e30;
  for (size_t i = 0; i < std::size(kRawReads); ++i) {
    if (read[i].empty()) continue;
    row(kRawReads[i].name, read[i]);
    for (const Timing& t : read[i]) fastest = std::min(fastest, t.s);
  }
  double best_load = 1e30;
  for (const Timing& t : load) best_load = std::min(best_load, t.s);
  std::printf("\nload / fastest raw read (best rounds): %.3f / %.3f s = %.2fx\n", best_load,
              fastest, fastest / best_load);
  std::printf("\nbytes each rank's load read:");
  for (size_t r = 0; r < per_rank.size(); ++r)
    std::printf(" rank %zu %.3f GB (%.0f%%)", r, std::stod(per_rank[r]) / 1e9,
                100.0 * std::stod(per_rank[r]) / static_cast<double>(bytes));
  std::printf(" of %.3f GB\n", gb);
  std::fflush(stdout);
}

void hiding(const Options& o, const std::shared_ptr<comm::ProcessGroup>& world) {
  const int rank = world ? world->rank() : 0, ranks = world ? world->size() : 1;
  struct Mode {
    const char* name;
    int64_t interval;
    bool async;
  };
  if (rank == 0)
    std::printf(
        "\n%s under %s, %lld steps, a checkpoint every %lld steps\n"
        "| saves | run s | training waited for saves s | step ms (median) |\n|---|---|---|---|\n",
        o.train_preset.c_str(), o.strategy.c_str(), static_cast<long long>(o.train_steps),
        static_cast<long long>(o.interval));
  for (Mode m : {Mode{"none", 0, false}, Mode{"blocking", o.interval, false},
                 Mode{"checkpoint.async", o.interval, true}}) {
    if (rank == 0) fs::remove_all(o.dir / "train");
    if (world) world->barrier()->wait();
    config::TrainConfig c = config(o.train_preset, o.strategy, ranks, o.dir / "train");
    c.training.max_steps = o.train_steps;
    c.checkpoint.interval = m.interval;
    c.checkpoint.async = m.async;
    train::TrainResult r;
    const double s = timed(world.get(), [&] {
                       train::Trainer t(c, world, quiet());
                       r = t.run();
                     }).s;
    if (rank == 0)
      std::printf("| %s | %.2f | %.3f | %.1f |\n", m.name, s, r.checkpoint_s, r.step_ms);
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    launch::tune_allocator();
    const Options o = parse(argc, argv);
    auto world = comm::init_world({});
    throughput(o, world);
    if (o.train_steps > 0) hiding(o, world);
    if ((world ? world->rank() : 0) == 0) fs::remove_all(o.dir);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "checkpoint_bench: error: %s\n", e.what());
    return 1;
  }
}
