#include "braid/parallel/zero/offload_file.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <system_error>

#include "braid/core/error.h"

namespace braid::parallel {
namespace {

std::string reason(int err) {
  return std::error_code(err, std::generic_category()).message();
}

int64_t round_up(int64_t bytes) {
  return (bytes + OffloadFile::kBlock - 1) / OffloadFile::kBlock * OffloadFile::kBlock;
}

// Opens `path` read-write, created and truncated; -1 with errno on failure.
int open_file(const std::filesystem::path& path, bool direct) {
  int flags = O_RDWR | O_CREAT | O_CLOEXEC | (direct ? O_DIRECT : 0);
  int fd;
  do {
    fd = ::open(path.c_str(), flags, 0600);
  } while (fd < 0 && errno == EINTR);
  return fd;
}

// Some filesystems accept O_DIRECT at open and refuse it at the first transfer: try one block.
bool direct_io_works(int fd) {
  void* block = std::aligned_alloc(OffloadFile::kBlock, OffloadFile::kBlock);
  if (!block) return false;
  std::memset(block, 0, OffloadFile::kBlock);
  ssize_t r;
  do {
    r = ::pwrite(fd, block, OffloadFile::kBlock, 0);
  } while (r < 0 && errno == EINTR);
  std::free(block);
  return r == OffloadFile::kBlock && ::ftruncate(fd, 0) == 0;
}

}  // namespace

void IoTicket::wait() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return done_; });
  if (!error_.empty()) throw Error(error_);
}

bool IoTicket::done() const {
  std::lock_guard lock(mu_);
  return done_;
}

void IoTicket::complete(std::string error) {
  {
    std::lock_guard lock(mu_);
    error_ = std::move(error);
    done_ = true;
  }
  cv_.notify_all();
}

OffloadFile::OffloadFile(std::filesystem::path path, bool try_direct) : path_(std::move(path)) {
  BRAID_CHECK(!path_.empty(), "offload file: empty path");
  if (path_.has_parent_path()) {
    std::error_code ec;
    std::filesystem::create_directories(path_.parent_path(), ec);
    BRAID_CHECK(!ec, "offload file ", path_.string(), ": cannot create its directory ",
                path_.parent_path().string(), ": ", ec.message());
  }
  // Another run using the same file would silently overwrite this one's state (and it ours):
  // the path is locked (on a descriptor of its own) before anything is written, and stays
  // locked until the file is removed.
  lock_fd_ = open_file(path_, /*direct=*/false);
  BRAID_CHECK(lock_fd_ >= 0, "offload file ", path_.string(), ": cannot create: ", reason(errno));
  if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(lock_fd_);
    lock_fd_ = -1;
    BRAID_THROW("offload file ", path_.string(), " is in use by another process (", reason(err),
                "): give each run its own parallel.offload_dir");
  }
  if (try_direct) fd_ = open_file(path_, /*direct=*/true);
  direct_ = fd_ >= 0;
  if (direct_ && !direct_io_works(fd_)) {
    ::close(fd_);
    direct_ = false;
  }
  if (!direct_) fd_ = open_file(path_, /*direct=*/false);
  if (fd_ < 0 || ::ftruncate(fd_, 0) != 0) {
    const int err = errno;
    if (fd_ >= 0) ::close(fd_);
    ::close(lock_fd_);
    BRAID_THROW("offload file ", path_.string(), ": cannot create: ", reason(err));
  }
  for (int i = 0; i < kThreads; ++i) threads_.emplace_back([this] { loop(); });
}

OffloadFile::~OffloadFile() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_) t.join();
  ::close(fd_);
  std::error_code ec;
  std::filesystem::remove(path_, ec);  // best effort, and still under the lock
  ::close(lock_fd_);
}

int OffloadFile::add_region(int64_t bytes) {
  BRAID_CHECK(bytes >= 0, "offload file ", path_.string(), ": region ", regions_.size(), " of ",
              bytes, " bytes");
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max() - kBlock;
  BRAID_CHECK(bytes <= kMax - file_bytes_, "offload file ", path_.string(), ": region ",
              regions_.size(), " of ", bytes, " bytes after ", file_bytes_,
              " bytes of regions overflows a file offset");
  const int64_t rounded = round_up(bytes);
  regions_.push_back({file_bytes_, rounded});
  file_bytes_ += rounded;
  return static_cast<int>(regions_.size()) - 1;
}

int64_t OffloadFile::region_bytes(int id) const {
  BRAID_CHECK(id >= 0 && id < num_regions(), "offload file ", path_.string(), ": no region ", id,
              " (", regions_.size(), " regions)");
  return regions_[static_cast<size_t>(id)].bytes;
}

int64_t OffloadFile::region_offset(int id) const {
  region_bytes(id);  // checks id
  return regions_[static_cast<size_t>(id)].offset;
}

void OffloadFile::reserve() {
  if (file_bytes_ == 0) return;
  struct stat st {};
  BRAID_CHECK(::fstat(fd_, &st) == 0, "offload file ", path_.string(), ": fstat: ", reason(errno));
  const int64_t held = static_cast<int64_t>(st.st_blocks) * 512;  // already on disk
  struct statvfs vfs {};
  const std::filesystem::path dir = path_.has_parent_path() ? path_.parent_path() : ".";
  BRAID_CHECK(::statvfs(dir.c_str(), &vfs) == 0, "offload file ", path_.string(), ": statvfs ",
              dir.string(), ": ", reason(errno));
  const auto free_bytes = static_cast<int64_t>(
      std::min<unsigned long long>(static_cast<unsigned long long>(vfs.f_bavail) * vfs.f_frsize,
                                   std::numeric_limits<int64_t>::max()));
  const int64_t wanted = file_bytes_ - std::min(held, file_bytes_);
  const auto describe = [&] {
    return detail::concat("offload file ", path_.string(), ": reserving ", regions_.size(),
                          " regions of ", file_bytes_, " bytes (", format_bytes(file_bytes_),
                          ") needs ", wanted, " bytes more but only ", free_bytes, " bytes (",
                          format_bytes(free_bytes), ") are free");
  };
  if (wanted > free_bytes) throw Error(describe());
  int rc;
  do {
    rc = ::posix_fallocate(fd_, 0, static_cast<off_t>(file_bytes_));
  } while (rc == EINTR);
  if (rc != 0) throw Error(describe() + ": posix_fallocate: " + reason(rc));
}

std::shared_ptr<IoTicket> OffloadFile::read(int id, Tensor dst) {
  return issue(/*is_read=*/true, id, std::move(dst));
}

std::shared_ptr<IoTicket> OffloadFile::write(int id, Tensor src) {
  return issue(/*is_read=*/false, id, std::move(src));
}

std::shared_ptr<IoTicket> OffloadFile::issue(bool is_read, int id, Tensor tensor) {
  const char* op = is_read ? "read" : "write";
  const int64_t region = region_bytes(id);
  BRAID_CHECK(tensor.defined(), "offload file ", path_.string(), ": ", op, " of region ", id,
              " with an undefined tensor");
  BRAID_CHECK(tensor.device().is_cpu(), "offload file ", path_.string(), ": ", op, " of region ",
              id, ": tensor on ", tensor.device().str(), ", not cpu");
  const auto bytes = static_cast<int64_t>(tensor.nbytes());
  const int64_t rounded = round_up(bytes);
  BRAID_CHECK(rounded <= region, "offload file ", path_.string(), ": ", op, " of region ", id,
              ": the tensor's ", bytes, " bytes (a transfer of ", rounded,
              " in 4096-byte blocks) do not fit in the region's ", region, " bytes");
  if (rounded > 0) {
    const auto address = reinterpret_cast<uintptr_t>(tensor.raw_data());
    BRAID_CHECK(address % kBlock == 0, "offload file ", path_.string(), ": ", op, " of region ", id,
                ": the tensor's data is at an address ", address % kBlock,
                " bytes past a 4096-byte boundary; O_DIRECT needs it aligned (use io_buffer(), "
                "or an allocation of 64 KiB or more)");
    const auto* base = static_cast<const char*>(tensor.storage()->data());
    const int64_t room = static_cast<int64_t>(tensor.storage()->capacity()) -
                         (static_cast<const char*>(tensor.raw_data()) - base);
    BRAID_CHECK(rounded <= room, "offload file ", path_.string(), ": ", op, " of region ", id,
                ": the transfer is ", rounded, " bytes (the tensor's ", bytes,
                " rounded up to 4096) but its storage has only ", room,
                " bytes from the tensor's start (use io_buffer(), or round numel up to a "
                "multiple of 4096 bytes)");
  }
  auto ticket = std::make_shared<IoTicket>();
  Job job{.is_read = is_read,
          .region = id,
          .offset = regions_[static_cast<size_t>(id)].offset,
          .bytes = rounded,
          .tensor = std::move(tensor),
          .ticket = ticket};
  {
    std::lock_guard lock(mu_);
    jobs_.push_back(std::move(job));
  }
  cv_.notify_one();
  return ticket;
}

int64_t OffloadFile::bytes_read() const {
  return bytes_read_.load(std::memory_order_relaxed);
}

int64_t OffloadFile::bytes_written() const {
  return bytes_written_.load(std::memory_order_relaxed);
}

double OffloadFile::busy_seconds() const {
  std::lock_guard lock(mu_);
  int64_t ns = busy_ns_;
  if (!running_.empty())  // the transfers in flight count up to now
    ns += std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() -
                                                               busy_since_)
              .count();
  return static_cast<double>(ns) * 1e-9;
}

std::deque<OffloadFile::Job>::iterator OffloadFile::next_job() {
  std::vector<int> held = running_;
  for (auto it = jobs_.begin(); it != jobs_.end(); ++it) {
    if (std::find(held.begin(), held.end(), it->region) == held.end()) return it;
    held.push_back(it->region);  // later jobs of this region wait for it too
  }
  return jobs_.end();
}

void OffloadFile::loop() {
  using Clock = std::chrono::steady_clock;
  for (;;) {
    Job job;
    {
      std::unique_lock lock(mu_);
      auto it = jobs_.end();
      cv_.wait(lock, [&] {
        it = next_job();
        return it != jobs_.end() || (stopping_ && jobs_.empty());
      });
      if (it == jobs_.end()) return;  // stopping, and everything issued has run
      job = std::move(*it);
      jobs_.erase(it);
      if (running_.empty()) busy_since_ = Clock::now();
      running_.push_back(job.region);
    }
    run(job);
    {
      std::lock_guard lock(mu_);
      running_.erase(std::find(running_.begin(), running_.end(), job.region));
      if (running_.empty())
        busy_ns_ += std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - busy_since_)
                        .count();
    }
    cv_.notify_all();  // a job of this region may run now, or the destructor may stop
  }
}

void OffloadFile::run(Job& job) {
  std::string error;
  try {
    error = transfer(job);
  } catch (const std::exception& e) {
    error = e.what();
  }
  if (error.empty()) {
    (job.is_read ? bytes_read_ : bytes_written_).fetch_add(job.bytes, std::memory_order_relaxed);
  } else {
    error = where(job) + " failed: " + error;
  }
  job.tensor = Tensor();  // the caller may free the memory as soon as the ticket is done
  job.ticket->complete(std::move(error));
}

std::string OffloadFile::transfer(Job& job) {
  if (job.bytes == 0) return {};
  char* data = static_cast<char*>(job.tensor.raw_data());
  int64_t done = 0;
  while (done < job.bytes) {
    const auto count = static_cast<size_t>(job.bytes - done);
    const auto at = static_cast<off_t>(job.offset + done);
    const ssize_t r =
        job.is_read ? ::pread(fd_, data + done, count, at) : ::pwrite(fd_, data + done, count, at);
    if (r < 0) {
      if (errno == EINTR) continue;
      return detail::concat(reason(errno), " (after ", done, " bytes)");
    }
    if (r == 0) {
      if (!job.is_read) return detail::concat("the device took no bytes after ", done);
      std::memset(data + done, 0, count);  // past the end of the file: never written
      break;
    }
    done += r;
  }
  if (!direct_) {  // Note [Leaving RAM]
    const auto at = static_cast<off_t>(job.offset);
    const auto count = static_cast<off_t>(job.bytes);
    if (!job.is_read && ::sync_file_range(fd_, at, count,
                                          SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE |
                                              SYNC_FILE_RANGE_WAIT_AFTER) != 0)
      return "sync_file_range: " + reason(errno);
    ::posix_fadvise(fd_, at, count, POSIX_FADV_DONTNEED);  // advice: its failure changes nothing
  }
  return {};
}

std::string OffloadFile::where(const Job& job) const {
  return detail::concat("offload file ", path_.string(), ": ", job.is_read ? "read" : "write",
                        " of region ", job.region, " (file offset ", job.offset, ", ", job.bytes,
                        " bytes)");
}

Tensor io_buffer(int64_t numel, DType dtype, MemCategory category) {
  const auto elem = static_cast<int64_t>(dtype_size(dtype));
  BRAID_CHECK(numel >= 0, "io_buffer: numel ", numel);
  BRAID_CHECK(OffloadFile::kBlock % elem == 0, "io_buffer: ", dtype_name(dtype),
              " elements do not tile 4096-byte blocks");
  const int64_t rounded = round_up(numel * elem);
  // Storage aligns 64 KiB and up; below that it promises 64 bytes, so allocate a block more
  // (less those 64) and start the view at the first 4096-byte boundary.
  const bool aligned = rounded >= static_cast<int64_t>(Storage::kPageAlignedFrom);
  const int64_t padding =
      aligned ? 0 : OffloadFile::kBlock - static_cast<int64_t>(Storage::kSmallAlignment);
  // On the host whatever the default device (Note [Offload on a device]).
  Tensor all = Tensor::empty(Shape{std::max<int64_t>(rounded + padding, elem) / elem}, dtype,
                             category, MemoryScope::current_tracker(), Device::cpu());
  const auto address = reinterpret_cast<uintptr_t>(all.raw_data());
  const auto skip = static_cast<int64_t>((OffloadFile::kBlock - address % OffloadFile::kBlock) %
                                         OffloadFile::kBlock);
  return all.flat_range(skip / elem, numel);
}

}  // namespace braid::parallel
