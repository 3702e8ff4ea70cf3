// Test-only helpers for the tokenizer parity tests: where the fetched data is, the expected ids
// (testdata/tokenizer_parity.json, made by tools/tokenizer_parity.mjs) and their hash.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

namespace braid::data::testutil {

inline std::string data_dir() {
  if (const char* v = std::getenv("BRAID_DATA_DIR"); v != nullptr && *v != '\0') return v;
  return BRAID_DEFAULT_DATA_DIR;
}

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline const nlohmann::json& parity_fixture() {
  static const nlohmann::json j = nlohmann::json::parse(
      read_bytes(std::string(BRAID_DATA_TESTDATA_DIR) + "/tokenizer_parity.json"));
  return j;
}

// A fixture text's file: "sample/x" under testdata/tokenizer_text, else under data_dir().
inline std::string parity_text_path(const std::string& name) {
  return name.rfind("sample/", 0) == 0
             ? std::string(BRAID_DATA_TESTDATA_DIR) + "/tokenizer_text/" + name.substr(7)
             : data_dir() + "/" + name;
}

// As tools/tokenizer_parity.mjs's hashIds.
inline std::string hash_ids(const std::vector<int32_t>& ids) {
  uint32_t a = 2166136261u, b = 0;
  for (int32_t id : ids) {
    a = (a ^ static_cast<uint32_t>(id)) * 16777619u;
    b = b * 31u + static_cast<uint32_t>(id);
  }
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%08x%08x", a, b);
  return buf;
}

// The index of the first id where a and b differ (the shorter's size when one is a prefix).
inline size_t first_difference(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  size_t k = 0;
  while (k < a.size() && k < b.size() && a[k] == b[k]) ++k;
  return k;
}

}  // namespace braid::data::testutil
