#include "braid/comm/local/local_hub.h"

#include <cstdlib>
#include <new>

#include "braid/comm/shm/shm_engine.h"

namespace braid::comm {

LocalHub::LocalHub(int size, size_t slot_bytes) : size_(size), slot_bytes_(slot_bytes) {
  size_t bytes = ShmEngine::arena_bytes(size, slot_bytes);
  arena_ = ::operator new (bytes, std::align_val_t{4096});
  ShmEngine::init_arena(arena_, size);
}

LocalHub::~LocalHub() {
  ::operator delete (arena_, std::align_val_t{4096});
}

int64_t LocalHub::arena_share(int rank) const {
  const auto bytes = static_cast<int64_t>(ShmEngine::arena_bytes(size_, slot_bytes_));
  return bytes / size_ + (rank < bytes % size_ ? 1 : 0);
}

void LocalHub::post(int src, int dst, int tag, LocalMessage message) {
  std::lock_guard lock(mu_);
  mailboxes_[{src, dst, tag}].push_back(std::move(message));
}

std::optional<LocalMessage> LocalHub::take(int src, int dst, int tag) {
  std::lock_guard lock(mu_);
  auto it = mailboxes_.find({src, dst, tag});
  if (it == mailboxes_.end() || it->second.empty()) return std::nullopt;
  auto message = std::move(it->second.front());
  it->second.erase(it->second.begin());
  if (it->second.empty()) mailboxes_.erase(it);
  return message;
}

std::shared_ptr<LocalHub> LocalHub::child(uint64_t seq, int color, int size) {
  std::lock_guard lock(mu_);
  auto& p = children_[{seq, color}];
  if (!p.hub) p.hub = std::make_shared<LocalHub>(size, slot_bytes_);
  auto hub = p.hub;
  if (++p.fetched == size) children_.erase({seq, color});
  return hub;
}

}  // namespace braid::comm
