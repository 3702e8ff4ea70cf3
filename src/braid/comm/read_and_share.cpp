#include "braid/comm/read_and_share.h"

#include "braid/comm/collective_guard.h"

namespace braid::comm {

void ReadAndShare::step(const std::function<void()>& read,
                        const std::function<std::shared_ptr<Work>(ProcessGroup&)>& share) {
  if (!failed_) {
    try {
      read();
    } catch (...) {
      failed_ = std::current_exception();
    }
  }
  if (group_ && group_->size() > 1) works_.push_back(share(*group_));
}

void ReadAndShare::finish() {
  for (auto& w : works_) w->wait();
  works_.clear();
  all_ranks_or_throw(group_, [&] {
    if (failed_) std::rethrow_exception(failed_);
  });
}

}  // namespace braid::comm
