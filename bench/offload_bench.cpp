// The disk beside offload (issue 29 goal 4): how fast this process moves a given number of bytes
// to and from a file of its own with O_DIRECT, as an offload file does (Note [Leaving RAM],
// parallel/zero/offload_file.h). bench/offload.sh runs one per rank at once, with the bytes a
// training step moved per rank, and sets the step's time beside the disk's.
//
//   offload_bench --file PATH --read-bytes R --write-bytes W [--chunk-mib 8] [--threads 1]
//                 [--rounds 3]
//
// The file holds R + W bytes, written once untimed (block allocation, which an offload file pays
// at start). Each round then times, best of the rounds:
//   write    W bytes into [R, R + W) in --chunk-mib transfers, --threads at a time (each thread
//            takes the next chunk), then fdatasync;
//   read     R bytes from [0, R) likewise;
//   overlap  both at once (a step's page reads run while the last page is written back).
// Prints one line: `write_s W read_s R overlap_s O` (seconds). The file is removed at the end.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "offload_bench: %s\n", what.c_str());
  std::exit(2);
}

struct Options {
  std::string file;
  int64_t read_bytes = 0, write_bytes = 0;
  int64_t chunk = int64_t{8} << 20;
  int threads = 1;
  int rounds = 3;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) die("option " + a + " needs a value");
    const char* v = argv[++i];
    if (a == "--file")
      o.file = v;
    else if (a == "--read-bytes")
      o.read_bytes = std::atoll(v);
    else if (a == "--write-bytes")
      o.write_bytes = std::atoll(v);
    else if (a == "--chunk-mib")
      o.chunk = std::atoll(v) << 20;
    else if (a == "--threads")
      o.threads = std::atoi(v);
    else if (a == "--rounds")
      o.rounds = std::atoi(v);
    else
      die("unknown option " + a);
  }
  if (o.file.empty() || o.read_bytes < 0 || o.write_bytes < 0 || o.chunk <= 0 || o.rounds < 1 ||
      o.threads < 1)
    die("usage: offload_bench --file PATH --read-bytes R --write-bytes W [--chunk-mib 8] "
        "[--threads 1] [--rounds 3]");
  // Whole 4096-byte blocks, as O_DIRECT needs.
  o.read_bytes = (o.read_bytes + 4095) / 4096 * 4096;
  o.write_bytes = (o.write_bytes + 4095) / 4096 * 4096;
  return o;
}

using Buffer = std::unique_ptr<char, decltype(&std::free)>;

Buffer buffer(int64_t bytes) {
  void* p = std::aligned_alloc(4096, static_cast<size_t>(bytes));
  if (!p) die("cannot allocate a transfer buffer");
  std::memset(p, 1, static_cast<size_t>(bytes));
  return Buffer(static_cast<char*>(p), &std::free);
}

// Moves [from, from + bytes) of fd in `chunk` transfers, `threads` at a time (each with a
// buffer of its own, taking the next chunk); seconds, with the fdatasync of a write.
double transfer(int fd, bool write, int64_t from, int64_t bytes, int64_t chunk, int threads) {
  std::atomic<int64_t> next{0};
  auto work = [&] {
    Buffer buf = buffer(chunk);
    for (int64_t at; (at = next.fetch_add(chunk)) < bytes;) {
      const auto n = static_cast<size_t>(std::min(chunk, bytes - at));
      for (size_t done = 0; done < n;) {
        const auto off = static_cast<off_t>(from + at + static_cast<int64_t>(done));
        const ssize_t r = write ? ::pwrite(fd, buf.get() + done, n - done, off)
                                : ::pread(fd, buf.get() + done, n - done, off);
        if (r <= 0) die(std::string(write ? "write" : "read") + " failed: " + std::strerror(errno));
        done += static_cast<size_t>(r);
      }
    }
  };
  const auto t0 = Clock::now();
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  if (write && ::fdatasync(fd) != 0) die(std::string("fdatasync: ") + std::strerror(errno));
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  const int fd = ::open(o.file.c_str(), O_CREAT | O_TRUNC | O_RDWR | O_DIRECT, 0600);
  if (fd < 0) die("cannot open " + o.file + " with O_DIRECT: " + std::strerror(errno));
  const int64_t c = o.chunk;
  const int k = o.threads;
  transfer(fd, /*write=*/true, 0, o.read_bytes + o.write_bytes, c, k);
  double best_w = 1e30, best_r = 1e30, best_o = 1e30;
  for (int round = 0; round < o.rounds; ++round) {
    best_w = std::min(best_w, transfer(fd, true, o.read_bytes, o.write_bytes, c, k));
    best_r = std::min(best_r, transfer(fd, false, 0, o.read_bytes, c, k));
    const auto t0 = Clock::now();
    std::thread reader([&] { transfer(fd, false, 0, o.read_bytes, c, k); });
    transfer(fd, true, o.read_bytes, o.write_bytes, c, k);
    reader.join();
    best_o = std::min(best_o, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  ::close(fd);
  ::unlink(o.file.c_str());
  std::printf("write_s %.3f read_s %.3f overlap_s %.3f\n", best_w, best_r, best_o);
  return 0;
}
