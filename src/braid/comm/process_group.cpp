#include "braid/comm/process_group.h"

#include <algorithm>
#include <cstdlib>
#include <future>
#include <numeric>

#include "braid/comm/chunking.h"
#include "braid/core/error.h"

namespace braid::comm {

namespace {

// Extra time a caller waits beyond the group timeout before deciding the comm thread is stuck.
constexpr std::chrono::seconds kWaitMargin{30};

bool byte_overlap(const Tensor& a, const Tensor& b) {
  if (!a.shares_storage(b) || a.numel() == 0 || b.numel() == 0) return false;
  auto lo_a = static_cast<const char*>(a.device_data());
  auto lo_b = static_cast<const char*>(b.device_data());
  return lo_a < lo_b + b.nbytes() && lo_b < lo_a + a.nbytes();
}

bool same_view(const Tensor& a, const Tensor& b) {
  return a.shares_storage(b) && a.device_data() == b.device_data() && a.nbytes() == b.nbytes();
}

}  // namespace

ProcessGroupOptions ProcessGroupOptions::from_env(ProcessGroupOptions base) {
  if (const char* t = std::getenv("BRAID_COMM_TIMEOUT"); t && *t) {
    char* end = nullptr;
    double s = std::strtod(t, &end);
    if (end == t || s <= 0)
      throw CommError(detail::concat("BRAID_COMM_TIMEOUT='", t, "' is not a positive number"));
    base.timeout = std::chrono::milliseconds(static_cast<int64_t>(s * 1000));
  }
  if (const char* d = std::getenv("BRAID_COMM_DEBUG"); d && *d) {
    base.debug = std::string(d) != "0";
  }
  if (const char* c = std::getenv("BRAID_COMM_SINGLE_COPY"); c && *c) {
    const std::string s = c;
    if (s != "0" && s != "1")
      throw CommError("BRAID_COMM_SINGLE_COPY='" + s + "': expected 0 or 1");
    base.one_copy = s == "1";
  }
  return base;
}

ProcessGroup::ProcessGroup(int rank, int size, ProcessGroupOptions options)
    : rank_(rank),
      size_(size),
      options_(std::move(options)),
      prefix_(std::make_shared<const std::string>(
          detail::concat("group '", options_.name, "' rank ", rank, ": "))),
      timeout_ms_(options_.timeout.count()) {
  if (size < 1 || rank < 0 || rank >= size)
    throw CommError(
        detail::concat("group '", options_.name, "': rank ", rank, " is not in [0, ", size, ")"));
}

ProcessGroup::~ProcessGroup() = default;

void ProcessGroup::start() {
  thread_ = std::make_unique<CommThread>([this] {
    const bool in_flight = poll_p2p();
    return poll_staged() || in_flight;  // after the backend's: what it finished is copied back
  });
}

void ProcessGroup::stop() {
  if (!thread_) return;
  thread_->stop();
  thread_.reset();
  fail_p2p("the group was destroyed");
  fail_staged("the group was destroyed");
}

void ProcessGroup::set_memory_tracker(std::shared_ptr<MemoryTracker> tracker) {
  std::lock_guard lock(memory_mu_);
  memory_.retarget(std::move(tracker));
}

std::shared_ptr<MemoryTracker> ProcessGroup::memory_tracker() const {
  std::lock_guard lock(memory_mu_);
  return memory_.tracker();
}

int64_t ProcessGroup::memory_bytes() const {
  std::lock_guard lock(memory_mu_);
  return memory_.bytes();
}

void ProcessGroup::charge_memory(int64_t bytes) {
  std::lock_guard lock(memory_mu_);
  memory_.add(bytes);
}

void ProcessGroup::release_memory(int64_t bytes) {
  std::lock_guard lock(memory_mu_);
  memory_.add(-bytes);
}

void ProcessGroup::mark_broken(const std::string& message) {
  if (!broken_.empty()) return;
  broken_ = message;
  on_fatal(prefix() + message);
}

std::shared_ptr<Work> ProcessGroup::make_work(const CollectiveOp& op) const {
  return std::make_shared<Work>(op.summary(), prefix_, timeout() + kWaitMargin);
}

bool ProcessGroup::start_inline(const CollectiveOp& op, Clock::time_point deadline) {
  run_collective(op, deadline);
  return true;
}

std::shared_ptr<Work> ProcessGroup::enqueue(CollectiveOp op) {
  const bool p2p = op.type == OpType::send || op.type == OpType::recv;
  std::lock_guard lock(issue_mu_);
  op.seq = p2p ? ++p2p_seq_ : ++coll_seq_;
  auto work = make_work(op);
  if (options_.synchronous && !p2p) {
    run_task(op, work);
    return work;
  }
  // Note [Inline collectives]: the issue lock stays held, so an op issued meanwhile by another
  // thread queues behind this one's continuation.
  if (!p2p && !staged(op) && can_run_inline(op)) {
    const bool settling = last_posted_ && last_posted_->is_completed();
    if (thread_->run_here_if_idle(settling, [&] { run_inline(op, work); })) return work;
  }
  last_posted_ = work;
  thread_->post([this, op = std::move(op), work]() mutable { run_task(op, work); });
  return work;
}

void ProcessGroup::run_inline(CollectiveOp& op, const std::shared_ptr<Work>& work) {
  if (!broken_.empty()) return run_task(op, work);
  try {
    if (!start_inline(op, Clock::now() + timeout())) {
      last_posted_ = work;
      thread_->post([this, op = std::move(op), work]() mutable {
        try {
          finish_inline(op);
          collective_done(op, work);
        } catch (const std::exception& e) {
          collective_failed(e, work);
        }
      });
      return;
    }
    collective_done(op, work);
  } catch (const std::exception& e) {
    collective_failed(e, work);
  }
}

void ProcessGroup::collective_done(CollectiveOp& op, const std::shared_ptr<Work>& work) {
  // Let go of the tensors before the caller can see the op done: memory the caller frees
  // after wait() is then really free (the tracker sees it at once).
  op.in = Tensor();
  op.out = Tensor();
  work->mark_done();
}

void ProcessGroup::collective_failed(const std::exception& e, const std::shared_ptr<Work>& work) {
  broken_ = e.what();
  std::string msg = prefix() + e.what();
  fail_p2p(msg);
  on_fatal(msg);
  work->mark_failed(std::string((msg)));
}

void ProcessGroup::run_task(CollectiveOp& op, const std::shared_ptr<Work>& work) {
  if (!broken_.empty()) {
    work->mark_failed(std::string((
        detail::concat(prefix(), op.describe(), " not run: the group failed earlier: ", broken_))));
    return;
  }
  auto deadline = Clock::now() + timeout();
  if (op.type == OpType::send || op.type == OpType::recv) {
    try {
      if (staged(op)) return start_staged_p2p(op, work, deadline);
      start_p2p(op, work, deadline);
    } catch (const std::exception& e) {
      work->mark_failed(std::string((prefix() + e.what())));
    }
    return;
  }
  try {
    Tensor away_out = staged(op) ? stage_collective(op) : Tensor();
    run_collective(op, deadline);
    if (away_out.defined()) away_out.copy_(op.out);  // Note [Device staging]
    collective_done(op, work);
  } catch (const std::exception& e) {
    collective_failed(e, work);
  }
}

#define BRAID_COMM_CHECK(cond, ...)                                              \
  do {                                                                           \
    if (!(cond)) [[unlikely]]                                                    \
      throw ::braid::CommError(prefix() + ::braid::detail::concat(__VA_ARGS__)); \
  } while (0)

std::shared_ptr<Work> ProcessGroup::all_reduce(Tensor t, ReduceOp op) {
  BRAID_COMM_CHECK(t.defined(), "all_reduce of an undefined tensor");
  return enqueue(CollectiveOp::make(OpType::all_reduce, t, t, op));
}

std::shared_ptr<Work> ProcessGroup::reduce_scatter(Tensor out, Tensor in, ReduceOp op) {
  BRAID_COMM_CHECK(out.defined() && in.defined(), "reduce_scatter of an undefined tensor");
  BRAID_COMM_CHECK(out.dtype() == in.dtype(), "reduce_scatter: output dtype ",
                   dtype_name(out.dtype()), " differs from input dtype ", dtype_name(in.dtype()));
  Chunk c = chunk_of(in.numel(), size_, rank_);
  BRAID_COMM_CHECK(out.numel() == c.size, "reduce_scatter: output has ", out.numel(),
                   " elements, expected ", c.size, " (chunk ", rank_, " of ", in.numel(), " over ",
                   size_, " ranks)");
  BRAID_COMM_CHECK(!byte_overlap(out, in) || same_view(out, in.flat_range(c.offset, c.size)),
                   "reduce_scatter: output overlaps the input other than as its chunk ", rank_);
  return enqueue(CollectiveOp::make(OpType::reduce_scatter, in, out, op));
}

std::shared_ptr<Work> ProcessGroup::all_gather(Tensor out, Tensor in) {
  BRAID_COMM_CHECK(out.defined() && in.defined(), "all_gather of an undefined tensor");
  BRAID_COMM_CHECK(out.dtype() == in.dtype(), "all_gather: output dtype ", dtype_name(out.dtype()),
                   " differs from input dtype ", dtype_name(in.dtype()));
  Chunk c = chunk_of(out.numel(), size_, rank_);
  BRAID_COMM_CHECK(in.numel() == c.size, "all_gather: input has ", in.numel(),
                   " elements, expected ", c.size, " (chunk ", rank_, " of ", out.numel(), " over ",
                   size_, " ranks)");
  BRAID_COMM_CHECK(!byte_overlap(out, in) || same_view(in, out.flat_range(c.offset, c.size)),
                   "all_gather: input overlaps the output other than as its chunk ", rank_);
  return enqueue(CollectiveOp::make(OpType::all_gather, in, out));
}

std::shared_ptr<Work> ProcessGroup::broadcast(Tensor t, int root) {
  BRAID_COMM_CHECK(t.defined(), "broadcast of an undefined tensor");
  BRAID_COMM_CHECK(root >= 0 && root < size_, "broadcast: root ", root, " is not in [0, ", size_,
                   ")");
  return enqueue(CollectiveOp::make(OpType::broadcast, t, t, ReduceOp::sum, root));
}

std::shared_ptr<Work> ProcessGroup::all_to_all(Tensor out, Tensor in) {
  BRAID_COMM_CHECK(out.defined() && in.defined(), "all_to_all of an undefined tensor");
  BRAID_COMM_CHECK(out.dtype() == in.dtype(), "all_to_all: output dtype ", dtype_name(out.dtype()),
                   " differs from input dtype ", dtype_name(in.dtype()));
  int64_t block = chunk_of(in.numel(), size_, rank_).size;
  BRAID_COMM_CHECK(out.numel() == block * size_, "all_to_all: output has ", out.numel(),
                   " elements, expected ", block * size_, " (", size_, " blocks of chunk ", rank_,
                   " of ", in.numel(), ")");
  BRAID_COMM_CHECK(!byte_overlap(out, in), "all_to_all: output overlaps the input");
  return enqueue(CollectiveOp::make(OpType::all_to_all, in, out));
}

std::shared_ptr<Work> ProcessGroup::barrier() {
  return enqueue(CollectiveOp::make(OpType::barrier));
}

std::shared_ptr<Work> ProcessGroup::send(Tensor t, int dst, int tag) {
  BRAID_COMM_CHECK(t.defined(), "send of an undefined tensor");
  BRAID_COMM_CHECK(dst >= 0 && dst < size_ && dst != rank_, "send: destination ", dst,
                   " is not another rank in [0, ", size_, ")");
  BRAID_COMM_CHECK(tag >= 0 && tag < (1 << 20), "send: tag ", tag, " is not in [0, 2^20)");
  return enqueue(CollectiveOp::make(OpType::send, t, t, ReduceOp::sum, dst, tag));
}

std::shared_ptr<Work> ProcessGroup::recv(Tensor t, int src, int tag) {
  BRAID_COMM_CHECK(t.defined(), "recv into an undefined tensor");
  BRAID_COMM_CHECK(src >= 0 && src < size_ && src != rank_, "recv: source ", src,
                   " is not another rank in [0, ", size_, ")");
  BRAID_COMM_CHECK(tag >= 0 && tag < (1 << 20), "recv: tag ", tag, " is not in [0, 2^20)");
  return enqueue(CollectiveOp::make(OpType::recv, t, t, ReduceOp::sum, src, tag));
}

std::shared_ptr<ProcessGroup> ProcessGroup::split(int color, int key, std::string name) {
  if (color < 0) color = -1;
  if (name.empty()) name = detail::concat(options_.name, "/", color);
  ProcessGroupOptions child = options_;
  child.name = name;
  child.timeout = timeout();
  auto in = Tensor::from_vector<int64_t>({color, key}, Shape{2});
  auto out = Tensor::empty(Shape{2 * size_}, DType::i64);
  // The outcome travels as a value: an exception_ptr crossing threads is opaque to TSan.
  struct Outcome {
    std::shared_ptr<ProcessGroup> group;
    std::string error;
  };
  auto result = std::make_shared<std::promise<Outcome>>();
  auto future = result->get_future();
  CollectiveOp op = CollectiveOp::make(OpType::split, in, out);
  std::shared_ptr<Work> work;
  {
    std::lock_guard lock(issue_mu_);
    op.seq = ++coll_seq_;
    work = make_work(op);
    last_posted_ = work;
    thread_->post([this, op, work, result, color, child, out]() mutable {
      run_task(op, work);
      if (!work->is_completed()) return;
      try {
        work->wait();
        const int64_t* kv = out.data<int64_t>();
        std::vector<int> members;
        for (int r = 0; r < size_; ++r)
          if (color >= 0 && kv[2 * r] == color) members.push_back(r);
        std::stable_sort(members.begin(), members.end(),
                         [&](int a, int b) { return kv[2 * a + 1] < kv[2 * b + 1]; });
        result->set_value({make_subgroup(color, members, op.seq, child), ""});
      } catch (const std::exception& e) {
        result->set_value({nullptr, prefix() + "split: " + e.what()});
      }
    });
  }
  work->wait();  // a failed exchange throws here
  if (future.wait_for(timeout() + kWaitMargin) != std::future_status::ready)
    throw CommError(prefix() + "split: creating the sub-group did not finish");
  Outcome outcome = future.get();
  if (!outcome.error.empty()) throw CommError(outcome.error);
  if (outcome.group) outcome.group->set_memory_tracker(memory_tracker());  // Note [Group memory]
  return outcome.group;
}

std::shared_ptr<ProcessGroup> ProcessGroup::split(const std::vector<int>& ranks, std::string name) {
  auto it = std::find(ranks.begin(), ranks.end(), rank_);
  for (int r : ranks)
    BRAID_COMM_CHECK(r >= 0 && r < size_, "split: rank ", r, " is not in [0, ", size_, ")");
  if (it == ranks.end()) return split(-1, 0, std::move(name));
  return split(0, static_cast<int>(it - ranks.begin()), std::move(name));
}

}  // namespace braid::comm
