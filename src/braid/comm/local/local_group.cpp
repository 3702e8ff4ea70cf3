#include "braid/comm/local/local_group.h"

#include <cstring>

#include "braid/core/error.h"

namespace braid::comm {

std::vector<std::shared_ptr<ProcessGroup>> LocalGroup::create(int size,
                                                              ProcessGroupOptions options) {
  BRAID_CHECK(size >= 1, "local group of ", size, " ranks");
  size_t slot = options.shm_slot_bytes ? options.shm_slot_bytes : kDefaultSlotBytes;
  auto hub = std::make_shared<LocalHub>(size, slot);
  std::vector<std::shared_ptr<ProcessGroup>> groups;
  for (int r = 0; r < size; ++r) groups.push_back(std::make_shared<LocalGroup>(hub, r, options));
  return groups;
}

LocalGroup::LocalGroup(std::shared_ptr<LocalHub> hub, int rank, ProcessGroupOptions options)
    : ProcessGroup(rank, hub->size(), std::move(options)),
      hub_(std::move(hub)),
      engine_(hub_->arena(), rank, hub_->size(), hub_->slot_bytes(), /*check_pids=*/false, nullptr,
              ShmEngine::kSpin, this->options().one_copy ? PeerMemory::shared : PeerMemory::slots) {
  charge_memory(hub_->arena_share(this->rank()));  // released by ~ProcessGroup
  start();
}

LocalGroup::~LocalGroup() {
  stop();
  engine_.mark_left();
}

void LocalGroup::run_collective(const CollectiveOp& op, Clock::time_point deadline) {
  engine_.run(op, deadline);
}

bool LocalGroup::can_run_inline(const CollectiveOp& op) const {
  return engine_.can_start(op);
}

bool LocalGroup::start_inline(const CollectiveOp& op, Clock::time_point deadline) {
  return engine_.start(op, deadline, ShmEngine::kInlinePatience);
}

void LocalGroup::finish_inline(const CollectiveOp& op) {
  engine_.finish(op);
}

void LocalGroup::on_fatal(const std::string&) {
  engine_.mark_left();
}

void LocalGroup::start_p2p(const CollectiveOp& op, std::shared_ptr<Work> work,
                           Clock::time_point deadline) {
  if (op.type == OpType::send) {
    // Sends are buffered: the message is copied out at once, so a send never waits.
    LocalMessage message;
    message.charge.retarget(memory_tracker());
    message.charge.resize(static_cast<int64_t>(op.in.nbytes()));  // OutOfMemory: no copy made
    message.bytes.resize(op.in.nbytes());
    if (!message.bytes.empty())
      std::memcpy(message.bytes.data(), op.in.raw_data(), message.bytes.size());
    hub_->post(rank(), op.root, op.tag, std::move(message));
    work->mark_done();
    return;
  }
  recvs_.push_back({op, std::move(work), deadline});
  poll_p2p();
}

bool LocalGroup::poll_p2p() {
  const auto now = Clock::now();
  // Recvs from one (source, tag) complete in order: only the first of each may take a message.
  for (size_t i = 0; i < recvs_.size();) {
    PendingRecv& p = recvs_[i];
    bool blocked = false;
    for (size_t j = 0; j < i; ++j)
      blocked |= recvs_[j].op.root == p.op.root && recvs_[j].op.tag == p.op.tag;
    std::optional<LocalMessage> message;
    if (!blocked) message = hub_->take(p.op.root, rank(), p.op.tag);
    std::string error;
    if (message) {
      const std::vector<std::byte>& bytes = message->bytes;
      if (bytes.size() != p.op.out.nbytes()) {
        error = detail::concat(p.op.describe(), ": message from rank ", p.op.root, " has ",
                               bytes.size(), " bytes, expected ", p.op.out.nbytes());
      } else if (!bytes.empty()) {
        std::memcpy(p.op.out.raw_data(), bytes.data(), bytes.size());
      }
      message.reset();  // releases the sender's charge
    } else if (!blocked && engine_.has_left(p.op.root)) {
      error =
          detail::concat(p.op.describe(), ": rank ", p.op.root, " left the group before sending");
    } else if (!blocked && now > p.deadline) {
      error = detail::concat(p.op.describe(), " timed out after ", timeout().count(), " ms: rank ",
                             p.op.root, " never sent");
    } else {
      ++i;
      continue;
    }
    auto work = std::move(p.work);
    recvs_.erase(recvs_.begin() + static_cast<std::ptrdiff_t>(i));
    if (error.empty()) {
      work->mark_done();
    } else {
      work->mark_failed(std::string((prefix() + error)));
      mark_broken(error);
    }
  }
  return !recvs_.empty();
}

void LocalGroup::fail_p2p(const std::string& why) {
  for (auto& p : recvs_)
    p.work->mark_failed(std::string((prefix() + p.op.describe() + " failed: " + why)));
  recvs_.clear();
}

std::shared_ptr<ProcessGroup> LocalGroup::make_subgroup(int color, const std::vector<int>& members,
                                                        uint64_t seq, ProcessGroupOptions options) {
  if (color < 0) return nullptr;
  int index = 0;
  while (members[index] != rank()) ++index;
  auto hub = hub_->child(seq, color, static_cast<int>(members.size()));
  return std::make_shared<LocalGroup>(std::move(hub), index, std::move(options));
}

}  // namespace braid::comm
