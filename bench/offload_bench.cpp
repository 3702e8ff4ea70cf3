// The disk beside offload (issue 29 goal 4): how fast this process moves a given number of bytes
// to and from a file of its own with O_DIRECT, as an offload file does (Note [Leaving RAM],
// parallel/zero/offload_file.h). bench/offload.sh runs one per rank at once, with the bytes a
// training step moved per rank, and sets the step's time beside the disk's.
//
//   offload_bench --file PATH --read-bytes R --write-bytes W [--chunk-mib 8] [--rounds 3]
//
// The file holds R + W bytes, written once untimed (block allocation, which an offload file pays
// at start). Each round then times, best of the rounds:
//   write    W bytes into [R, R + W) in --chunk-mib transfers, one at a time, then fdatasync;
//   read     R bytes from [0, R) likewise;
//   overlap  both at once, on two threads (a step's page reads run while the last page is
//            written back).
// Prints one line: `write_s W read_s R overlap_s O` (seconds). The file is removed at the end.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

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
    else if (a == "--rounds")
      o.rounds = std::atoi(v);
    else
      die("unknown option " + a);
  }
  if (o.file.empty() || o.read_bytes < 0 || o.write_bytes < 0 || o.chunk <= 0 || o.rounds < 1)
    die("usage: offload_bench --file PATH --read-bytes R --write-bytes W [--chunk-mib 8] "
        "[--rounds 3]");
  // Whole 4096-byte blocks, as O_DIRECT needs.
  o.read_bytes = (o.read_bytes + 4095) / 4096 * 4096;
  o.write_bytes = (o.write_bytes + 4095) / 4096 * 4096;
  return o;
}

// Moves [from, from + bytes) of fd in `chunk` transfers from/into buf; seconds.
double transfer(int fd, bool write, int64_t from, int64_t bytes, int64_t chunk, char* buf) {
  const auto t0 = Clock::now();
  for (int64_t done = 0; done < bytes;) {
    const auto n = static_cast<size_t>(std::min(chunk, bytes - done));
    const auto at = static_cast<off_t>(from + done);
    const ssize_t r = write ? ::pwrite(fd, buf, n, at) : ::pread(fd, buf, n, at);
    if (r <= 0) die(std::string(write ? "write" : "read") + " failed: " + std::strerror(errno));
    done += r;
  }
  if (write && ::fdatasync(fd) != 0) die(std::string("fdatasync: ") + std::strerror(errno));
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  const int fd = ::open(o.file.c_str(), O_CREAT | O_TRUNC | O_RDWR | O_DIRECT, 0600);
  if (fd < 0) die("cannot open " + o.file + " with O_DIRECT: " + std::strerror(errno));
  auto buffer = [&] {
    void* p = std::aligned_alloc(4096, static_cast<size_t>(o.chunk));
    if (!p) die("cannot allocate the transfer buffer");
    std::memset(p, 1, static_cast<size_t>(o.chunk));
    return std::unique_ptr<char, decltype(&std::free)>(static_cast<char*>(p), &std::free);
  };
  auto rbuf = buffer(), wbuf = buffer();
  transfer(fd, /*write=*/true, 0, o.read_bytes + o.write_bytes, o.chunk, wbuf.get());
  double best_w = 1e30, best_r = 1e30, best_o = 1e30;
  for (int round = 0; round < o.rounds; ++round) {
    best_w = std::min(best_w, transfer(fd, true, o.read_bytes, o.write_bytes, o.chunk, wbuf.get()));
    best_r = std::min(best_r, transfer(fd, false, 0, o.read_bytes, o.chunk, rbuf.get()));
    const auto t0 = Clock::now();
    std::thread reader([&] { transfer(fd, false, 0, o.read_bytes, o.chunk, rbuf.get()); });
    transfer(fd, true, o.read_bytes, o.write_bytes, o.chunk, wbuf.get());
    reader.join();
    best_o = std::min(best_o, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  ::close(fd);
  ::unlink(o.file.c_str());
  std::printf("write_s %.3f read_s %.3f overlap_s %.3f\n", best_w, best_r, best_o);
  return 0;
}
