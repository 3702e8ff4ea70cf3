// Temporary directories of one test process, removed when it exits: ctest runs test processes
// in parallel, and two writing one path would read each other's half-written files.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <mutex>
#include <set>
#include <string>
#include <system_error>

namespace braid::testing_util {

class PrivateTempDirs {
 public:
  ~PrivateTempDirs() {
    std::error_code ignored;
    for (const auto& dir : dirs_) std::filesystem::remove_all(dir, ignored);
  }
  std::filesystem::path add(const std::string& name) {
    std::filesystem::path dir =
        std::filesystem::temp_directory_path() / (name + "_" + std::to_string(::getpid()));
    std::lock_guard lock(mutex_);
    dirs_.insert(dir);
    return dir;
  }

 private:
  std::mutex mutex_;
  std::set<std::filesystem::path> dirs_;
};
inline PrivateTempDirs private_temp_dirs;

// temp_directory_path()/name_<pid>, removed at exit (not created here).
inline std::filesystem::path private_temp_dir(const std::string& name) {
  return private_temp_dirs.add(name);
}

}  // namespace braid::testing_util
