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

// Collective over group: every rank opens the same checkpoint, whose files the ranks verify
// between them. `say` gets one line per checkpoint passed over (and per thing passed over in
// the root: an unusable `latest`, a step directory without a manifest; checkpoint_dir.h). First,
// rank 0 removes what saves that did not finish left under root (saying so), whatever `resume` is.
// Null: start fresh.
std::unique_ptr<CheckpointReader> open_resume_checkpoint(
    const std::string& resume, const std::filesystem::path& root, comm::ProcessGroup* group,
    const std::function<void(const std::string&)>& say);

}  // namespace braid::checkpoint
