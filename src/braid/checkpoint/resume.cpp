#include "braid/checkpoint/resume.h"

#include "braid/checkpoint/checkpoint_dir.h"
#include "braid/comm/collective_guard.h"
#include "braid/comm/gather_strings.h"
#include "braid/core/error.h"

namespace braid::checkpoint {

namespace fs = std::filesystem;

namespace {

using Load = std::function<void(const CheckpointReader&)>;

// Opens dir on every rank, then verifies it whole (no `load`, or a version before 4) or loads
// it checking what is read; any rank's problem throws on all of them.
// `loading` is set once the load starts.
std::unique_ptr<CheckpointReader> open_checked(const fs::path& dir, comm::ProcessGroup* group,
                                               const Load& load, bool& loading) {
  std::unique_ptr<CheckpointReader> reader;
  comm::all_ranks_or_throw(group, [&] { reader = std::make_unique<CheckpointReader>(dir); });
  if (!load || !reader->checks_while_reading()) reader->verify(group);
  if (!load) return reader;
  loading = true;
  reader->defer_corruption();
  load(*reader);
  reader->check_reads(group);
  return reader;
}

}  // namespace

std::unique_ptr<CheckpointReader> open_resume_checkpoint(
    const std::string& resume, const fs::path& root, comm::ProcessGroup* group,
    const std::function<void(const std::string&)>& say, const Load& load) {
  std::vector<std::string> notes;
  if (!root.empty() && (group == nullptr || group->rank() == 0))
    remove_unfinished_saves(root, &notes);
  for (const std::string& n : notes) say("checkpoint: " + n);
  notes.clear();
  if (resume == "never") return nullptr;
  const bool automatic = resume == "auto";
  const fs::path where = automatic ? root : fs::path(resume);
  // Rank 0's view decides, so every rank takes the same path (and its collectives).
  const bool is_checkpoint =
      comm::all_gather_strings(group, fs::exists(where / kManifestName) ? "1" : "0")[0] == "1";
  bool loading = false;
  if (!automatic && is_checkpoint) return open_checked(where, group, load, loading);
  BRAID_CHECK(automatic || fs::is_directory(where), "training.resume: ", where.string(),
              " is neither a checkpoint nor a directory of checkpoints");
  // Rank 0's listing, so every rank tries the same candidates in the same order.
  std::string listing;
  for (const fs::path& p : checkpoints_newest_first(where, &notes)) listing += p.string() + "\n";
  listing = comm::all_gather_strings(group, listing)[0];
  for (const std::string& n : notes) say("resume: " + n);
  std::string first_error;
  int rejected = 0;
  for (size_t at = 0; at < listing.size();) {
    const size_t end = listing.find('\n', at);
    const fs::path dir = listing.substr(at, end - at);
    at = end + 1;
    // A checkpoint that fails to open or verify, or whose load met a bad block, is passed
    // over (Note [Verified reads]); any other error of a load is the run's own and is thrown.
    bool loading = false;
    try {
      return open_checked(dir, group, load, loading);
    } catch (const Error& e) {
      if (loading && !dynamic_cast<const CorruptCheckpoint*>(&e)) throw;
      ++rejected;
      if (first_error.empty()) first_error = e.what();
      say("resume: skipping " + dir.string() + ": " + e.what() +
          "; trying the previous checkpoint");
    }
  }
  BRAID_CHECK(rejected == 0, "training.resume: none of the ", rejected, " checkpoint(s) under ",
              where.string(), " is valid; the newest: ", first_error);
  BRAID_CHECK(automatic, "training.resume: ", where.string(), " is not a checkpoint (no ",
              kManifestName, ") and holds none");
  return nullptr;
}

}  // namespace braid::checkpoint
