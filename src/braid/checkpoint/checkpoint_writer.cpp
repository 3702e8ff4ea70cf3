#include "braid/checkpoint/checkpoint_writer.h"

#include <cstring>

#include "braid/checkpoint/file_io.h"
#include "braid/checkpoint/save_plan.h"
#include "braid/comm/collective_guard.h"
#include "braid/comm/gather_strings.h"
#include "braid/core/error.h"
#include "braid/core/memory_tracker.h"

namespace braid::checkpoint {

namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

constexpr int kWriting = 0, kWritten = 1, kFailed = 2;

}  // namespace

SaveResult save_checkpoint(comm::ProcessGroup* group, optim::Optimizer& optimizer,
                           const SaveRequest& req) {
  const auto t0 = Clock::now();
  SavePlan plan(group, optimizer, req);
  SaveResult r;
  try {
    comm::all_ranks_or_throw(group, [&] {
      plan.stage("write");
      FileSink sink(plan.file_path(), /*direct=*/false, plan.block_bytes());
      plan.serialize(optimizer, [&](const void* p, size_t n) { sink.append(p, n); });
      const std::vector<uint32_t> blocks = sink.block_crcs();
      const std::string table = plan.table(blocks);
      sink.append(table.data(), table.size());
      plan.stage("sync");
      sink.finish();
      plan.file_written(sink.bytes(), sink.crc32c(), blocks);
    });
    r = plan.finish(group);
  } catch (...) {
    plan.abandon();  // every rank has stopped writing: the collective above failed on all
    throw;
  }
  r.seconds = r.blocked_seconds = since(t0);
  return r;
}

AsyncSaver::AsyncSaver() = default;

AsyncSaver::~AsyncSaver() {
  join();
}

void AsyncSaver::join() {
  if (writer_.joinable()) writer_.join();
}

std::optional<SaveResult> AsyncSaver::start(comm::ProcessGroup* group, optim::Optimizer& optimizer,
                                            const SaveRequest& req) {
  std::optional<SaveResult> previous = poll(group, /*wait=*/true);
  started_ = Clock::now();
  auto plan = std::make_unique<SavePlan>(group, optimizer, req);
  const int64_t bytes = plan->file_bytes(optimizer);
  comm::all_ranks_or_throw(group, [&] {
    if (!buffer_.defined() || bytes > buffer_.numel() * 4) {
      buffer_ = Tensor();  // the old buffer goes before the new one is charged
      try {
        buffer_ = Tensor::empty(Shape{(bytes + 3) / 4}, DType::f32, MemCategory::checkpoint,
                                MemoryScope::current_tracker(), Device::cpu());
      } catch (const OutOfMemory& e) {
        throw OutOfMemory(std::string(e.what()) + " (checkpoint.async keeps a copy of this " +
                          "rank's checkpoint file, " + format_bytes(bytes) +
                          ", in memory: set checkpoint.async: false, or raise memory.budget)");
      }
    }
    char* at = static_cast<char*>(buffer_.raw_data());
    plan->serialize(optimizer, [&](const void* p, size_t n) {
      std::memcpy(at, p, n);
      at += n;
    });
  });
  plan_ = std::move(plan);
  state_ = kWriting;
  error_.clear();
  SavePlan* p = plan_.get();
  const char* data = static_cast<const char*>(buffer_.raw_data());
  writer_ = std::thread([this, p, data, bytes] {
    try {
      p->stage("write");
      FileSink sink(p->file_path(), /*direct=*/true, p->block_bytes());
      sink.append(data, static_cast<size_t>(bytes));
      const std::vector<uint32_t> blocks = sink.block_crcs();
      const std::string table = p->table(blocks);
      sink.append(table.data(), table.size());
      p->stage("sync");
      sink.finish();
      p->file_written(sink.bytes(), sink.crc32c(), blocks);
      state_ = kWritten;
    } catch (const std::exception& e) {
      error_ = e.what();
      state_ = kFailed;
    }
  });
  blocked_seconds_ = since(started_);
  return previous;
}

std::optional<SaveResult> AsyncSaver::poll(comm::ProcessGroup* group, bool wait) {
  if (!plan_) return std::nullopt;
  const auto t0 = Clock::now();
  if (wait) join();
  const std::vector<std::string> states =
      comm::all_gather_strings(group, std::string(1, static_cast<char>('0' + state_.load())));
  bool failed = false, done = true;
  for (const std::string& s : states) {
    failed |= s[0] == '0' + kFailed;
    done &= s[0] == '0' + kWritten;
  }
  if (failed) {
    join();  // the writer thread uses the plan
    std::unique_ptr<SavePlan> plan = std::move(plan_);
    const std::string step = std::to_string(plan->request().step);
    try {
      comm::all_ranks_or_throw(group, [&] {
        if (state_ == kFailed) BRAID_THROW(error_, " (checkpoint of step ", step, ")");
      });
    } catch (...) {
      plan->abandon();  // every rank joined its writer before the collective
      throw;
    }
  }
  if (!done) return std::nullopt;
  join();
  std::unique_ptr<SavePlan> plan = std::move(plan_);
  SaveResult r;
  try {
    r = plan->finish(group);
  } catch (...) {
    plan->abandon();
    throw;
  }
  r.seconds = since(started_);
  r.blocked_seconds = blocked_seconds_ + since(t0);
  return r;
}

}  // namespace braid::checkpoint
