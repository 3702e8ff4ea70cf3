// The checkpoint root directory (Note [Checkpoint layout], manifest.h): step directories, the
// `latest` pointer, saves in progress and pruning.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace braid::checkpoint {

std::string step_dir_name(int64_t step);  // "step-00000100"
std::string rank_file_name(int rank);     // "rank-00003.bin"
std::string temp_dir_name(int64_t step);  // ".tmp-step-00000100"
inline constexpr const char* kManifestName = "manifest.json";
inline constexpr const char* kLatestName = "latest";

// The step a "step-NNNNNNNN" directory name stands for, or -1.
int64_t step_of(const std::string& dir_name);

// Complete-looking checkpoints under root (step directories with a manifest), the one `latest`
// names first, then the others newest first. Empty when root does not exist. What was passed
// over goes to `notes`, a line each: a `latest` that is unreadable, not a pointer or names no
// checkpoint (the step directories are listed all the same), a step directory without a
// manifest.
std::vector<std::filesystem::path> checkpoints_newest_first(
    const std::filesystem::path& root, std::vector<std::string>* notes = nullptr);

// Removes the temporary directories of saves that did not finish (a crash mid-save) under root,
// a line each to `notes`. Never throws.
void remove_unfinished_saves(const std::filesystem::path& root, std::vector<std::string>* notes);

// After a save: points `latest` at step_dir (atomically), then removes step directories older
// than the keep_last newest (0 keeps all) and saves left in progress by a crash.
void publish(const std::filesystem::path& root, const std::string& step_dir, int64_t keep_last);

}  // namespace braid::checkpoint
