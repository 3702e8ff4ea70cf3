// LocalHub: what the ranks of one local group share (they are threads of one process): the
// shared-memory arena its ShmEngines run on, mailboxes for send/recv, and the hubs of groups
// split from it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <tuple>
#include <vector>

#include "braid/core/memory_tracker.h"

namespace braid::comm {

// A buffered send: its bytes, charged to the sender's tracker until the receiver has copied
// them out and destroyed the message (Note [Group memory]).
struct LocalMessage {
  std::vector<std::byte> bytes;
  MemoryCharge charge{MemCategory::communication};
};

class LocalHub {
 public:
  LocalHub(int size, size_t slot_bytes);
  ~LocalHub();
  LocalHub(const LocalHub&) = delete;
  LocalHub& operator=(const LocalHub&) = delete;

  int size() const { return size_; }
  size_t slot_bytes() const { return slot_bytes_; }
  void* arena() const { return arena_; }
  // This rank's part of the arena: a 1/size share (Note [Group memory]).
  int64_t arena_share(int rank) const;

  void post(int src, int dst, int tag, LocalMessage message);
  std::optional<LocalMessage> take(int src, int dst, int tag);

  // The hub of the sub-group (split seq, color): the first member to ask creates it.
  std::shared_ptr<LocalHub> child(uint64_t seq, int color, int size);

 private:
  int size_;
  size_t slot_bytes_;
  void* arena_;
  std::mutex mu_;
  std::map<std::tuple<int, int, int>, std::vector<LocalMessage>> mailboxes_;
  struct Pending {
    std::shared_ptr<LocalHub> hub;
    int fetched = 0;
  };
  std::map<std::pair<uint64_t, int>, Pending> children_;
};

}  // namespace braid::comm
