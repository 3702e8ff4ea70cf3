// What `braid checkpoint inspect | verify | export` do, on one process without starting a run:
// list a checkpoint's contents and layout, check every file's checksum, and write an HF model
// directory from the master weights of any checkpoint (as DeepSpeed's zero_to_fp32 does).
#pragma once

#include <filesystem>
#include <string>

namespace braid::train {

// `path` is a checkpoint directory, or a checkpoint root (its newest checkpoint: `latest`).
std::filesystem::path resolve_checkpoint(const std::filesystem::path& path);
std::string inspect_checkpoint(const std::filesystem::path& path);
// Throws the first problem; returns a line saying what was checked.
std::string verify_checkpoint(const std::filesystem::path& path);
// The model is the one the checkpoint's run config names; returns a line naming what was written.
std::string export_checkpoint(const std::filesystem::path& path, const std::filesystem::path& out);

}  // namespace braid::train
