#include "braid/checkpoint/checkpoint_dir.h"

#include <algorithm>
#include <cstdio>

#include "braid/checkpoint/file_io.h"
#include "braid/core/error.h"

namespace braid::checkpoint {

namespace fs = std::filesystem;

std::string step_dir_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step-%08lld", static_cast<long long>(step));
  return buf;
}

std::string rank_file_name(int rank) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "rank-%05d.bin", rank);
  return buf;
}

std::string temp_dir_name(int64_t step) {
  return ".tmp-" + step_dir_name(step);
}

int64_t step_of(const std::string& name) {
  if (name.size() < 6 || name.rfind("step-", 0) != 0) return -1;
  int64_t step = 0;
  for (size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9' || step > (INT64_MAX - 9) / 10) return -1;
    step = step * 10 + (name[i] - '0');
  }
  return step;
}

namespace {
// Step directories under root, newest first.
std::vector<std::pair<int64_t, fs::path>> step_dirs(const fs::path& root) {
  std::vector<std::pair<int64_t, fs::path>> dirs;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const int64_t s = step_of(e.path().filename().string());
    if (s >= 0 && e.is_directory()) dirs.emplace_back(s, e.path());
  }
  std::sort(dirs.begin(), dirs.end(), [](auto& a, auto& b) { return a.first > b.first; });
  return dirs;
}
}  // namespace

namespace {
// The step directory `latest` names under root, or "" with a note saying why it names none.
std::string latest_pointer(const fs::path& root, std::vector<std::string>& notes) {
  const fs::path latest = root / kLatestName;
  std::error_code ec;
  const fs::file_status st = fs::symlink_status(latest, ec);
  if (!fs::exists(st)) return "";
  const std::string what = latest.string();
  const std::string then = "; taking the newest step directory instead";
  if (!fs::is_regular_file(fs::status(latest, ec))) {
    notes.push_back(
        what +
        (fs::is_symlink(st) && !fs::exists(latest, ec) ? " is a dangling link" : " is not a file") +
        then);
    return "";
  }
  std::string name;
  try {
    name = read_small_file(latest);
  } catch (const std::exception& e) {
    notes.push_back(std::string(e.what()) + then);
    return "";
  }
  while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
  if (step_of(name) < 0) {
    notes.push_back(what + " names '" + name.substr(0, 64) + "', not a step directory" + then);
    return "";
  }
  if (!fs::exists(root / name / kManifestName, ec)) {
    notes.push_back(what + " names " + name + ", which is not a saved checkpoint" + then);
    return "";
  }
  return name;
}
}  // namespace

std::vector<fs::path> checkpoints_newest_first(const fs::path& root,
                                               std::vector<std::string>* notes) {
  std::vector<fs::path> out;
  std::vector<std::string> said;
  if (!fs::is_directory(root)) return out;
  const std::string latest = latest_pointer(root, said);
  if (!latest.empty()) out.push_back(root / latest);
  std::error_code ec;
  for (auto& [step, dir] : step_dirs(root)) {
    if (std::find(out.begin(), out.end(), dir) != out.end()) continue;
    if (fs::exists(dir / kManifestName, ec))
      out.push_back(dir);
    else
      said.push_back("skipping " + dir.string() + ": no " + kManifestName +
                     " (not a checkpoint, or a save that did not finish)");
  }
  if (notes) notes->insert(notes->end(), said.begin(), said.end());
  return out;
}

void remove_unfinished_saves(const fs::path& root, std::vector<std::string>* notes) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(".tmp-step-", 0) != 0) continue;
    std::error_code rm;
    fs::remove_all(e.path(), rm);
    if (notes)
      notes->push_back((rm ? "could not remove " : "removed ") + e.path().string() +
                       ", a save that did not finish" + (rm ? ": " + rm.message() : ""));
  }
}

void publish(const fs::path& root, const std::string& step_dir, int64_t keep_last) {
  std::error_code ec;
  if (fs::exists(fs::symlink_status(root / kLatestName, ec)) &&
      !fs::is_regular_file(fs::symlink_status(root / kLatestName, ec)))
    fs::remove_all(root / kLatestName, ec);  // not ours (Note [Checkpoint layout]): replaced
  write_file_atomically(root / kLatestName, step_dir + "\n");
  remove_unfinished_saves(root, nullptr);
  if (keep_last <= 0) return;
  const int64_t newest = step_of(step_dir);
  int64_t kept = 0;
  for (auto& [step, dir] : step_dirs(root)) {
    if (step > newest) continue;  // a newer one from an earlier run's future: not ours to prune
    if (++kept > keep_last) fs::remove_all(dir, ec);
  }
}

}  // namespace braid::checkpoint
