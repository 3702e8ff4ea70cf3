// all_gather_strings: every rank's bytes, in rank order, on every rank (lengths may differ).
// Collective over `group`; null or a group of one returns {mine}.
#pragma once

#include <string>
#include <vector>

#include "braid/comm/process_group.h"

namespace braid::comm {

std::vector<std::string> all_gather_strings(ProcessGroup* group, const std::string& mine);

}  // namespace braid::comm
