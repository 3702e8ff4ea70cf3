#include "braid/parallel/zero/offload_file.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <thread>

namespace braid::parallel {
namespace {

namespace fs = std::filesystem;

// A directory of one test's files, removed with everything in it at the end of the test.
class Scratch {
 public:
  explicit Scratch(const fs::path& root) {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string test = std::string(info->test_suite_name()) + "_" + info->name();
    for (char& c : test)
      if (c == '/') c = '_';
    dir_ = root / ("braid_offload_" + std::to_string(::getpid()) + "_" + test);
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  fs::path file(const std::string& name) const { return dir_ / name; }

 private:
  fs::path dir_;
};

Tensor random_buffer(int64_t numel, DType dtype, uint64_t seed) {
  Rng rng(seed);
  Tensor t = io_buffer(numel, dtype, MemCategory::optimizer_state);
  t.copy_(Tensor::randn(Shape{numel}, rng, 1.0f, dtype));
  return t;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

bool all_zero(const Tensor& t) {
  const auto* p = static_cast<const unsigned char*>(t.raw_data());
  for (size_t i = 0; i < t.nbytes(); ++i)
    if (p[i] != 0) return false;
  return true;
}

// Where the files go: the temporary directory (tmpfs on some machines; O_DIRECT is refused there
// before Linux 6.6) and the working directory (ctest runs tests in the build tree, on a real
// disk), the latter also with buffered I/O forced, so both paths run wherever the tests do.
struct Where {
  bool temp_dir;
  bool try_direct;
};

class OffloadFileOn : public ::testing::TestWithParam<Where> {
 protected:
  fs::path root() const {
    return GetParam().temp_dir ? fs::temp_directory_path() : fs::current_path();
  }
  fs::path file(const std::string& name) const { return scratch_.file(name); }
  std::unique_ptr<OffloadFile> open(const std::string& name) const {
    return std::make_unique<OffloadFile>(file(name), GetParam().try_direct);
  }

 private:
  Scratch scratch_{root()};
};

INSTANTIATE_TEST_SUITE_P(Roots, OffloadFileOn,
                         ::testing::Values(Where{true, true}, Where{false, true},
                                           Where{false, false}),
                         [](const auto& p) {
                           return std::string(p.param.temp_dir ? "TempDir" : "WorkingDir") +
                                  (p.param.try_direct ? "" : "Buffered");
                         });

TEST_P(OffloadFileOn, RoundTripsSeveralRegionsBitForBit) {
  auto owned = open("state.bin");
  OffloadFile& file = *owned;
  std::cout << "[   info   ] " << file.path().parent_path().string() << ": "
            << (file.is_direct() ? "O_DIRECT" : "buffered + POSIX_FADV_DONTNEED") << "\n";
  struct Case {
    int64_t numel;
    DType dtype;
  };
  const std::vector<Case> cases = {{1, DType::f32},
                                   {1024, DType::f32},
                                   {100003, DType::f32},
                                   {(1 << 18) + 3, DType::bf16},
                                   {5000, DType::f16}};
  std::vector<Tensor> sent;
  std::vector<int> ids;
  std::vector<std::shared_ptr<IoTicket>> tickets;
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto& c = cases[i];
    ids.push_back(file.add_region(c.numel * static_cast<int64_t>(dtype_size(c.dtype))));
    sent.push_back(random_buffer(c.numel, c.dtype, 100 + i));
    tickets.push_back(file.write(ids.back(), sent.back()));
  }
  for (auto& t : tickets) t->wait();
  for (size_t i = 0; i < cases.size(); ++i) {
    Tensor back = io_buffer(cases[i].numel, cases[i].dtype, MemCategory::optimizer_state);
    back.zero_();
    file.read(ids[i], back)->wait();
    EXPECT_TRUE(same_bytes(back, sent[i])) << "region " << ids[i];
  }
}

TEST_P(OffloadFileOn, UnwrittenRegionsReadAsZeros) {
  auto owned = open("zeros.bin");
  OffloadFile& file = *owned;
  const int a = file.add_region(40000);
  const int b = file.add_region(1 << 20);
  const int c = file.add_region(12345);
  file.write(b, random_buffer((1 << 20) / 4, DType::f32, 1))->wait();
  for (int id : {a, c}) {
    Tensor dst = io_buffer(file.region_bytes(id) / 4, DType::f32, MemCategory::optimizer_state);
    dst.fill_(7.0);
    file.read(id, dst)->wait();
    EXPECT_TRUE(all_zero(dst)) << "region " << id;
  }
  file.reserve();  // allocated space reads as zeros too, written regions keep their bytes
  Tensor dst = io_buffer(12345 / 4, DType::f32, MemCategory::optimizer_state);
  dst.fill_(7.0);
  file.read(c, dst)->wait();
  EXPECT_TRUE(all_zero(dst));
}

TEST_P(OffloadFileOn, RunsInIssueOrder) {
  auto owned = open("order.bin");
  OffloadFile& file = *owned;
  const int64_t n = 300000;
  const int id = file.add_region(n * 4);
  Tensor first = random_buffer(n, DType::f32, 1);
  Tensor second = random_buffer(n, DType::f32, 2);
  Tensor got_first = io_buffer(n, DType::f32, MemCategory::optimizer_state);
  Tensor got_second = io_buffer(n, DType::f32, MemCategory::optimizer_state);
  // Issued back to back, waited for only at the end.
  auto w1 = file.write(id, first);
  auto r1 = file.read(id, got_first);
  auto w2 = file.write(id, second);
  auto r2 = file.read(id, got_second);
  r2->wait();
  EXPECT_TRUE(w1->done() && r1->done() && w2->done());
  EXPECT_TRUE(same_bytes(got_first, first));
  EXPECT_TRUE(same_bytes(got_second, second));
}

// Note [Two transfers]: transfers of other regions run beside each other, but each region's
// writes and reads keep their issue order: every read returns the write issued just before it.
TEST_P(OffloadFileOn, KeepsEachRegionsOrderWhileOthersRunAtOnce) {
  auto owned = open("interleaved.bin");
  OffloadFile& file = *owned;
  constexpr int kRegions = 3, kRounds = 6;
  const int64_t sizes[kRegions] = {200000, 1000, 70000};
  for (int64_t n : sizes) file.add_region(n * 4);
  std::vector<Tensor> sent, back;
  std::vector<std::shared_ptr<IoTicket>> tickets;
  const auto t0 = std::chrono::steady_clock::now();
  for (int k = 0; k < kRounds; ++k) {
    for (int r = 0; r < kRegions; ++r) {
      sent.push_back(random_buffer(sizes[r], DType::f32, 100 * k + r));
      back.push_back(io_buffer(sizes[r], DType::f32, MemCategory::optimizer_state));
      tickets.push_back(file.write(r, sent.back()));
      tickets.push_back(file.read(r, back.back()));
    }
  }
  for (auto& t : tickets) t->wait();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (size_t i = 0; i < sent.size(); ++i)
    EXPECT_TRUE(same_bytes(back[i], sent[i]))
        << "round " << i / kRegions << ", region " << i % kRegions;
  // Time with a transfer in flight: some, and never more than the wall time (not a sum over
  // the threads).
  EXPECT_GT(file.busy_seconds(), 0.0);
  EXPECT_LE(file.busy_seconds(), wall);
}

TEST_P(OffloadFileOn, ManyConcurrentTickets) {
  auto owned = open("many.bin");
  OffloadFile& file = *owned;
  constexpr int kRegions = 64;
  std::vector<Tensor> sent, back;
  std::vector<std::shared_ptr<IoTicket>> writes, reads;
  for (int i = 0; i < kRegions; ++i) {
    const int64_t numel = 1000 + 977 * i;
    file.add_region(numel * 4);
    sent.push_back(random_buffer(numel, DType::f32, 1000 + i));
    back.push_back(io_buffer(numel, DType::f32, MemCategory::optimizer_state));
  }
  for (int i = 0; i < kRegions; ++i) writes.push_back(file.write(i, sent[i]));
  for (int i = 0; i < kRegions; ++i) reads.push_back(file.read(i, back[i]));
  // Half the tickets are waited on by another thread, the rest here.
  std::thread waiter([&] {
    for (int i = 0; i < kRegions; i += 2) reads[i]->wait();
  });
  for (int i = 1; i < kRegions; i += 2) reads[i]->wait();
  waiter.join();
  for (int i = 0; i < kRegions; ++i) {
    EXPECT_TRUE(writes[i]->done());
    EXPECT_TRUE(same_bytes(back[i], sent[i])) << "region " << i;
  }
}

TEST(OffloadFile, AccountsRoundedBytes) {
  Scratch scratch(fs::temp_directory_path());
  OffloadFile file(scratch.file("bytes.bin"));
  EXPECT_EQ(file.region_bytes(file.add_region(1)), 4096);
  EXPECT_EQ(file.region_bytes(file.add_region(8192)), 8192);
  EXPECT_EQ(file.region_bytes(file.add_region(100000)), 102400);
  EXPECT_EQ(file.region_offset(2), 12288);
  EXPECT_EQ(file.file_bytes(), 4096 + 8192 + 102400);
  file.write(0, random_buffer(1, DType::f32, 1))->wait();
  file.write(2, random_buffer(25000, DType::f32, 2))->wait();
  EXPECT_EQ(file.bytes_written(), 4096 + 102400);
  EXPECT_EQ(file.bytes_read(), 0);
  file.read(1, io_buffer(2048, DType::f32, MemCategory::optimizer_state))->wait();
  file.read(2, io_buffer(10, DType::f32, MemCategory::optimizer_state))->wait();  // a prefix
  EXPECT_EQ(file.bytes_read(), 8192 + 4096);
}

TEST(OffloadFile, DestructorDrainsQueueAndRemovesFile) {
  Scratch scratch(fs::temp_directory_path());
  const fs::path path = scratch.file("gone/deeper/state.bin");
  std::vector<std::shared_ptr<IoTicket>> tickets;
  {
    OffloadFile file(path);
    EXPECT_TRUE(fs::exists(path));
    for (int i = 0; i < 16; ++i) {
      file.add_region(1 << 20);
      tickets.push_back(file.write(i, random_buffer((1 << 20) / 4, DType::f32, i)));
    }
  }
  EXPECT_FALSE(fs::exists(path));
  for (auto& t : tickets) {
    EXPECT_TRUE(t->done());
    t->wait();  // succeeded
  }
}

TEST(OffloadFile, AFileInUseByAnotherRunIsRefusedAndLeftIntact) {
  Scratch scratch(fs::temp_directory_path());
  const fs::path path = scratch.file("shared.bin");
  OffloadFile first(path);
  first.add_region(4096);
  Tensor data = random_buffer(1024, DType::f32, 7);
  first.write(0, data)->wait();
  try {
    OffloadFile second(path);
    FAIL() << "a second file on the same path was allowed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is in use by another process"), std::string::npos)
        << e.what();
  }
  Tensor back = io_buffer(1024, DType::f32, MemCategory::optimizer_state);
  first.read(0, back)->wait();  // not truncated by the refused one
  EXPECT_TRUE(same_bytes(back, data));
}

TEST(OffloadFile, ReserveOfMoreThanTheDiskHoldsNamesPathAndBytes) {
  Scratch scratch(fs::temp_directory_path());
  const fs::path path = scratch.file("huge.bin");
  OffloadFile file(path);
  file.add_region(int64_t{1} << 20);
  file.reserve();  // fits
  EXPECT_GE(fs::file_size(path), uint64_t{1} << 20);
  file.add_region(int64_t{1} << 60);  // 1 EiB
  try {
    file.reserve();
    FAIL() << "reserve() of 1 EiB succeeded";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(path.string()), std::string::npos) << msg;
    EXPECT_NE(msg.find(std::to_string((int64_t{1} << 60) + (int64_t{1} << 20))), std::string::npos)
        << msg;
    EXPECT_NE(msg.find("free"), std::string::npos) << msg;
  }
}

TEST(OffloadFile, FailedTransferFailsItsTicketOnly) {
  Scratch scratch(fs::temp_directory_path());
  // A file size limit makes writes past 64 KiB fail with EFBIG, as a full disk would.
  OffloadFile file(scratch.file("limit.bin"));
  const int small = file.add_region(4096);
  const int big = file.add_region(1 << 20);
  struct FileSizeLimit {
    rlimit old{};
    void (*old_handler)(int) = nullptr;
    FileSizeLimit() {
      EXPECT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
      rlimit limited = old;
      limited.rlim_cur = std::min<rlim_t>(old.rlim_cur, 64 << 10);
      old_handler = std::signal(SIGXFSZ, SIG_IGN);
      EXPECT_EQ(::setrlimit(RLIMIT_FSIZE, &limited), 0);
    }
    ~FileSizeLimit() {
      ::setrlimit(RLIMIT_FSIZE, &old);
      std::signal(SIGXFSZ, old_handler);
    }
  };
  std::shared_ptr<IoTicket> failed, after;
  Tensor sent = random_buffer(1024, DType::f32, 2);
  {
    FileSizeLimit limit;
    failed = file.write(big, random_buffer((1 << 20) / 4, DType::f32, 1));
    after = file.write(small, sent);
    after->wait();
    // The two regions' transfers may run at once (Note [Two transfers]): the limit stays until
    // the big write has run too.
    while (!failed->done()) std::this_thread::yield();
  }
  for (int twice = 0; twice < 2; ++twice) {
    try {
      failed->wait();
      FAIL() << "a write past the file size limit succeeded";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(file.path().string()), std::string::npos) << msg;
      EXPECT_NE(msg.find("write of region 1 (file offset 4096, 1048576 bytes)"), std::string::npos)
          << msg;
      EXPECT_NE(msg.find("File too large"), std::string::npos) << msg;
    }
  }
  Tensor back = io_buffer(1024, DType::f32, MemCategory::optimizer_state);
  file.read(small, back)->wait();
  EXPECT_TRUE(same_bytes(back, sent));
  EXPECT_EQ(file.bytes_written(), 4096);  // the failed write is not counted
}

TEST(OffloadFile, TransferLongerThanItsRegionIsRefused) {
  Scratch scratch(fs::temp_directory_path());
  OffloadFile file(scratch.file("long.bin"));
  file.add_region(4096);
  try {
    file.write(0, io_buffer(1025, DType::f32, MemCategory::optimizer_state));
    FAIL() << "a 4100-byte write into a 4096-byte region was accepted";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(
        msg.find("write of region 0: the tensor's 4100 bytes (a transfer of 8192 in 4096-byte "
                 "blocks) do not fit in the region's 4096 bytes"),
        std::string::npos)
        << msg;
  }
  EXPECT_THROW(file.read(1, io_buffer(16, DType::f32, MemCategory::optimizer_state)), Error);
  EXPECT_THROW(file.read(0, Tensor()), Error);
}

TEST(OffloadFile, UnalignedOrShortTensorIsRefused) {
  Scratch scratch(fs::temp_directory_path());
  OffloadFile file(scratch.file("refused.bin"));
  file.add_region(1 << 20);
  Tensor unaligned = io_buffer(2048, DType::f32, MemCategory::optimizer_state).flat_range(1, 1024);
  try {
    file.read(0, unaligned);
    FAIL() << "a read into an unaligned tensor was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("read of region 0: the tensor's data is at an address 4 "
                                         "bytes past a 4096-byte boundary"),
              std::string::npos)
        << e.what();
  }
  // Below 64 KiB Storage promises 64-byte alignment only: find an aligned start whose storage
  // ends short of the next 4096-byte boundary (each size fails for one of the 64 offsets).
  std::vector<Tensor> keep;
  Tensor short_tensor;
  for (int64_t numel : {1008, 3008, 1504, 2000}) {
    Tensor t = Tensor::empty(Shape{numel}, DType::f32, MemCategory::optimizer_state);
    keep.push_back(t);
    const auto skip =
        static_cast<int64_t>((4096 - reinterpret_cast<uintptr_t>(t.raw_data()) % 4096) % 4096);
    const int64_t room = numel * 4 - skip;
    if (room > 0 && room % 4096 != 0) {
      short_tensor = t.flat_range(skip / 4, room / 4);
      break;
    }
  }
  ASSERT_TRUE(short_tensor.defined());
  try {
    file.read(0, short_tensor);
    FAIL() << "a read into a tensor without room for the rounded transfer was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("but its storage has only"), std::string::npos)
        << e.what();
  }
}

TEST(OffloadFile, IoBuffersAreAlignedWithRoom) {
  for (int64_t numel : {0, 1, 1000, 1024, 16383, 16384, 100000}) {
    for (DType dtype : {DType::f32, DType::bf16}) {
      Tensor t = io_buffer(numel, dtype, MemCategory::optimizer_state);
      EXPECT_EQ(t.numel(), numel);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw_data()) % 4096, 0u) << numel;
      const auto used =
          static_cast<const char*>(t.raw_data()) - static_cast<const char*>(t.storage()->data());
      EXPECT_GE(static_cast<int64_t>(t.storage()->capacity()) - used,
                (static_cast<int64_t>(t.nbytes()) + 4095) / 4096 * 4096)
          << numel;
    }
  }
}

}  // namespace
}  // namespace braid::parallel
