// Which checkpoint a run resumes from (training.resume): "never"; "auto", the newest valid
// checkpoint under the checkpoint root, falling back past invalid ones and saying so (none:
// a fresh start); or a path, that checkpoint (or the newest valid one under that root), which
// must be valid.
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <string>

#include "braid/checkpoint/checkpoint_reader.h"
#include "braid/comm/process_group.h"

namespace braid::checkpoint {

// Collective over group: every rank opens the same checkpoint. `say` gets one line per
// checkpoint passed over (and per thing passed over in the root: an unusable `latest`, a step
// directory without a manifest; checkpoint_dir.h). First, rank 0 removes what saves that did
// not finish left under root (saying so), whatever `resume` is. Null: start fresh.
//
// Without `load`, the ranks verify the checkpoint's files between them before it is returned.
// With it, load(reader) is called on every rank and loads the state; a version 4 checkpoint is
// checked as it is read (Note [Verified reads]) and a bad block met by any rank fails the
// checkpoint on every rank after load returns (CorruptCheckpoint), as a failed verify does: the
// previous checkpoint is tried, or the error thrown. So `load` must leave nothing of a failed
// attempt behind: a later call loads the previous checkpoint over it or starts afresh.
std::unique_ptr<CheckpointReader> open_resume_checkpoint(
    const std::string& resume, const std::filesystem::path& root, comm::ProcessGroup* group,
    const std::function<void(const std::string&)>& say,
    const std::function<void(const CheckpointReader&)>& load = {});

}  // namespace braid::checkpoint
