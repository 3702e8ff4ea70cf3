// OffloadFile: one rank's file of fixed regions on a slow tier (NVMe or disk), read and written
// asynchronously on I/O threads of its own while compute goes on. ZeRO's offload keeps
// optimizer state and (stage 3) parameter shards in such regions (DeepSpeed's
// `offload_optimizer: {device: nvme}`).
//
// Contract:
//   - Transfers of one region run one at a time in issue order: a read issued after a write of
//     the same region returns the written bytes, and a write issued after a read waits for it.
//     Transfers of different regions may run at once and finish in any order (Note [Two
//     transfers]). Each returns an IoTicket; wait() rethrows its failure.
//   - A failed transfer fails only its own ticket; later ones still run. No ticket waits forever:
//     the threads complete every job they are given, the destructor included.
//   - Every transfer is a whole number of 4096-byte blocks: the tensor's nbytes rounded up to
//     4096, from its first byte. Its data must start on a 4096-byte boundary and its storage must
//     hold the rounded size from there (Note [Transfer tail]). io_buffer() makes such tensors;
//     any allocation of 64 KiB or more is aligned already (Storage).
//   - The tensor must stay untouched (no reads for a read, no writes for a write) until its
//     ticket is done; the file drops its handle before the ticket completes, so memory the caller
//     frees after wait() is free at once.
//   - Calls on an OffloadFile come from one thread (its owner); tickets may be waited on from any.
//
// Note [Transfer tail]: a transfer covers the tensor's bytes rounded up to 4096, so a read also
// overwrites the storage's bytes between the tensor's end and the rounded end (with what was
// written there, or zeros), and a write sends them. Keep nothing there: give every offloaded
// tensor its own storage, or views starting 4096 bytes apart.
//
// Note [Two transfers]: two threads take the issued transfers in issue order, each the first one
// whose region no earlier transfer still holds (queued or running), so a step's read of the next
// page runs while the last page is written back, as the step-time model assumes (both directions
// at once, parallel/cost/step_cost.cpp). On the project's VM two processes moving 6.2 GB each
// with O_DIRECT took 4.4-4.5 s to write and 5.4-8.4 s to read one after the other, 8.0-8.6 s
// both at once; with one thread a bf16 GPT-2 large step there (bench/offload.sh) took 10.1-12.9
// s, with two 9.4-10.6 s (docs/benchmarks.md "Offload against the disk").
//
// Note [Leaving RAM]: the file is opened with O_DIRECT where the filesystem allows it, so the
// bytes go straight between the tensor and the device and never sit in the page cache. Where
// O_DIRECT is refused (some tmpfs, network and FUSE filesystems) I/O is buffered; after each
// transfer its range is written back (sync_file_range) and dropped from the page cache
// (posix_fadvise POSIX_FADV_DONTNEED), which only drops clean pages, hence the write-back first.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "braid/core/tensor.h"

namespace braid::parallel {

// The handle of one asynchronous read or write.
class IoTicket {
 public:
  // Blocks until done; rethrows a failure as braid::Error naming the file, the region, the file
  // offset, the byte count and the system's reason. Every call rethrows it.
  void wait();
  bool done() const;

 private:
  friend class OffloadFile;
  void complete(std::string error);  // error empty: success

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::string error_;
};

class OffloadFile {
 public:
  static constexpr int64_t kBlock = 4096;  // transfer, region and alignment granule

  // Creates (truncates) `path`, creating its directory. O_DIRECT where the filesystem allows it,
  // else buffered I/O (Note [Leaving RAM]); is_direct() says which. try_direct = false asks for
  // buffered I/O wherever the file is (tests of that path, filesystems where O_DIRECT is slow).
  explicit OffloadFile(std::filesystem::path path, bool try_direct = true);
  ~OffloadFile();  // waits for queued I/O (never throws), closes and removes the file
  OffloadFile(const OffloadFile&) = delete;
  OffloadFile& operator=(const OffloadFile&) = delete;

  // Reserves a region of `bytes` (rounded up to 4096) after the previous ones; regions read back
  // as zeros until written. Returns its id: 0, 1, 2, ...
  int add_region(int64_t bytes);
  int num_regions() const { return static_cast<int>(regions_.size()); }
  int64_t region_bytes(int id) const;   // rounded
  int64_t region_offset(int id) const;  // in the file
  // Allocates disk space for every region now (posix_fallocate), so a full disk fails at start,
  // with an error naming the path, the bytes wanted and the bytes free, not mid-training.
  void reserve();

  // Asynchronous; see the contract above. The transfer (tensor nbytes rounded up to 4096) may be
  // shorter than the region (it covers the region's start) but not longer. Bad arguments throw
  // here, at issue; I/O failures arrive through the ticket.
  std::shared_ptr<IoTicket> read(int id, Tensor dst);
  std::shared_ptr<IoTicket> write(int id, Tensor src);

  int64_t bytes_read() const;  // totals of the transfers completed so far (rounded sizes)
  int64_t bytes_written() const;
  double busy_seconds() const;  // time with a transfer in flight so far
  // The three counters at once; a step's traffic is the difference of two readings.
  struct Totals {
    int64_t read = 0, written = 0;
    double busy_s = 0;
    Totals operator-(const Totals& o) const {
      return {read - o.read, written - o.written, busy_s - o.busy_s};
    }
  };
  Totals totals() const { return {bytes_read(), bytes_written(), busy_seconds()}; }
  int64_t file_bytes() const { return file_bytes_; }  // sum of the regions
  bool is_direct() const { return direct_; }
  const std::filesystem::path& path() const { return path_; }

 private:
  struct Region {
    int64_t offset = 0;
    int64_t bytes = 0;
  };
  struct Job {
    bool is_read = false;
    int region = 0;
    int64_t offset = 0;  // in the file
    int64_t bytes = 0;   // rounded
    Tensor tensor;
    std::shared_ptr<IoTicket> ticket;
  };

  static constexpr int kThreads = 2;  // Note [Two transfers]

  std::shared_ptr<IoTicket> issue(bool is_read, int id, Tensor tensor);
  void loop();
  // The first queued job no earlier job holds the region of, or jobs_.end(); under mu_.
  std::deque<Job>::iterator next_job();
  void run(Job& job);
  std::string transfer(Job& job);  // empty on success, else the reason
  std::string where(const Job& job) const;

  std::filesystem::path path_;
  int fd_ = -1;
  int lock_fd_ = -1;  // holds the path's lock (flock) while the file exists
  bool direct_ = false;
  std::vector<Region> regions_;
  int64_t file_bytes_ = 0;
  std::atomic<int64_t> bytes_read_{0};
  std::atomic<int64_t> bytes_written_{0};
  mutable std::mutex mu_;
  int64_t busy_ns_ = 0;  // time with a transfer in flight, up to busy_since_'s interval
  std::condition_variable cv_;
  std::deque<Job> jobs_;
  std::vector<int> running_;                          // the regions of the transfers in flight
  std::chrono::steady_clock::time_point busy_since_;  // when running_ last became non-empty
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

// A 1-D tensor of `numel` elements fit for OffloadFile transfers: data 4096-aligned and storage
// room for nbytes rounded up to 4096. Allocations under 64 KiB carry up to 4 KiB of padding
// (charged to `category` in the thread's MemoryScope tracker, like everything else).
Tensor io_buffer(int64_t numel, DType dtype, MemCategory category);

}  // namespace braid::parallel
