// all_ranks_or_throw: runs a step that may fail on some ranks and not others (an allocation
// past one rank's memory budget, a file only one node cannot read), then lets every rank know.
// Without it the ranks that succeeded would walk into the next collective and wait there for
// the dead rank until the watchdog fires; with it every rank throws at once: the failing ranks
// their own error, the others an Error naming the failing ranks and the first one's message.
// `fn` must not issue collectives on `group` (the ranks would not agree on their number).
#pragma once

#include <functional>

#include "braid/comm/process_group.h"

namespace braid::comm {

void all_ranks_or_throw(ProcessGroup* group, const std::function<void()>& fn);

}  // namespace braid::comm
