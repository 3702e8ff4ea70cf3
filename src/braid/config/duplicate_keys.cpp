#include "braid/config/duplicate_keys.h"

#include <yaml-cpp/yaml.h>

#include <map>
#include <nlohmann/json.hpp>
#include <vector>

#include "braid/core/error.h"

namespace braid::config {

namespace {

std::string join(const std::string& path, const std::string& key) {
  return path.empty() ? key : path + "." + key;
}

struct Position {
  int line, column;  // 1-based
};

[[noreturn]] void duplicate(const std::string& source, const std::string& key, Position first,
                            Position again) {
  if (first.line == again.line)
    BRAID_THROW(source, ":", again.line, ": duplicate key '", key, "' twice on line ", again.line,
                " (columns ", first.column, " and ", again.column, ")");
  BRAID_THROW(source, ":", again.line, ": duplicate key '", key, "' at lines ", first.line, " and ",
              again.line);
}

void walk(const YAML::Node& node, const std::string& path, const std::string& source) {
  if (node.IsSequence()) {
    for (const auto& element : node) walk(element, path, source);
    return;
  }
  if (!node.IsMap()) return;
  std::map<std::string, std::pair<Position, YAML::Node>> first;
  for (auto it = node.begin(); it != node.end(); ++it) {
    if (!it->first.IsScalar()) continue;  // a complex key: braid's dialects reject it later
    const std::string key = join(path, it->first.Scalar());
    const Position here{it->first.Mark().line + 1, it->first.Mark().column + 1};
    auto [at, inserted] = first.try_emplace(it->first.Scalar(), here, it->second);
    // The same value written twice means one thing (a real Accelerate file repeats `debug:
    // false`); two values would let the last win silently.
    if (!inserted && YAML::Dump(at->second.second) != YAML::Dump(it->second))
      duplicate(source, key, at->second.first, here);
    walk(it->second, key, source);
  }
}

}  // namespace

void reject_duplicate_keys(const YAML::Node& root, const std::string& source) {
  walk(root, "", source);
}

// A scan of the tokens that matter (strings, brackets, commas), since nlohmann::json reports
// no positions: an object's string is a key when it comes first or after a comma.
void reject_duplicate_json_keys(std::string_view text, const std::string& source) {
  struct Frame {
    bool is_object;
    std::string path;
    bool expect_key = true;
    std::string last_key;
    std::map<std::string, Position> first;
  };
  std::vector<Frame> stack;
  int line = 1;
  size_t line_start = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\n') {
      ++line;
      line_start = i + 1;
    } else if (c == '{' || c == '[') {
      std::string path;
      if (!stack.empty())
        path = stack.back().is_object ? join(stack.back().path, stack.back().last_key)
                                      : stack.back().path;
      stack.push_back({c == '{', path, true, "", {}});
    } else if ((c == '}' || c == ']') && !stack.empty()) {
      stack.pop_back();
    } else if (c == ',' && !stack.empty()) {
      stack.back().expect_key = true;
    } else if (c == '"') {
      const size_t start = i;
      for (++i; i < text.size() && text[i] != '"'; ++i)
        if (text[i] == '\\') ++i;
      if (stack.empty() || !stack.back().is_object || !stack.back().expect_key) continue;
      Frame& f = stack.back();
      // Decoded, so "a" and "\u0061" are the same key, as for the parser.
      f.last_key = nlohmann::json::parse(text.substr(start, i + 1 - start)).get<std::string>();
      f.expect_key = false;
      const Position here{line, static_cast<int>(start - line_start) + 1};
      auto [at, inserted] = f.first.emplace(f.last_key, here);
      if (!inserted) duplicate(source, join(f.path, f.last_key), at->second, here);
    }
  }
}

}  // namespace braid::config
