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

std::vector<fs::path> checkpoints_newest_first(const fs::path& root) {
  std::vector<fs::path> out;
  if (!fs::is_directory(root)) return out;
  std::error_code ec;
  if (fs::exists(root / kLatestName, ec)) {
    std::string name = read_small_file(root / kLatestName);
    while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
    if (step_of(name) >= 0 && fs::exists(root / name / kManifestName, ec))
      out.push_back(root / name);
  }
  for (auto& [step, dir] : step_dirs(root))
    if (std::find(out.begin(), out.end(), dir) == out.end() && fs::exists(dir / kManifestName, ec))
      out.push_back(dir);
  return out;
}

void publish(const fs::path& root, const std::string& step_dir, int64_t keep_last) {
  write_file_atomically(root / kLatestName, step_dir + "\n");
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(".tmp-step-", 0) == 0) fs::remove_all(e.path(), ec);
  }
  if (keep_last <= 0) return;
  const int64_t newest = step_of(step_dir);
  int64_t kept = 0;
  for (auto& [step, dir] : step_dirs(root)) {
    if (step > newest) continue;  // a newer one from an earlier run's future: not ours to prune
    if (++kept > keep_last) fs::remove_all(dir, ec);
  }
}

}  // namespace braid::checkpoint
