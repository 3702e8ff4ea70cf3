// The dialect corpus: real DeepSpeed JSON and Accelerate YAML files from public repositories
// (testdata/dialects/SOURCES names each one's repository, path and commit), each with what
// DeepSpeed or Accelerate does with it (testdata/dialects/EXPECTED): accepted files map to the
// TrainConfig values the original tool's rules give; refused ones are refused naming the key.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "braid/config/accelerate_config.h"
#include "braid/config/deepspeed_config.h"
#include "braid/config/provenance.h"
#include "testing/run_ranks.h"

namespace braid::config {
namespace {

namespace fs = std::filesystem;
const std::string kDir = std::string(BRAID_REPO_DIR) + "/testdata/dialects";

// The braid YAML beside every file: values that differ from DeepSpeed's and Accelerate's
// defaults, so a test sees which one won.
TrainConfig yaml(Provenance* origins = nullptr) {
  return parse_config(R"(
model: {preset: gpt2-tiny}
data: {random_tokens: true, seq_len: 32}
training: {micro_batch_size: 3, gradient_accumulation_steps: 5, max_steps: 5000,
           precision: bf16}
optimizer: {lr: 7.0e-4, weight_decay: 0.05, beta1: 0.85, beta2: 0.95, eps: 1.0e-6,
            grad_clip: 0.7}
schedule: {type: cosine, warmup_steps: 7}
parallel: {strategy: ddp}
)",
                      "x.yaml", origins);
}

struct Expected {
  std::string verdict;  // "ok" or "refused"
  std::string key;      // refused: the key the error names
  std::map<std::string, std::string> values;
};

// EXPECTED: "<dir/file> ok key=value..." or "<dir/file> refused KEY", '#' comments, and a line
// may continue on the next one that starts with whitespace.
std::map<std::string, Expected> read_expected() {
  std::ifstream in(kDir + "/EXPECTED");
  std::map<std::string, Expected> out;
  std::string line, name;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream is(line);
    if (!std::isspace(static_cast<unsigned char>(line[0]))) {
      is >> name;
      is >> out[name].verdict;
      if (out[name].verdict == "refused") is >> out[name].key;
    }
    for (std::string kv; is >> kv;) {
      const auto eq = kv.find('=');
      out[name].values[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
  }
  return out;
}

// Applies one corpus file on 2 data-parallel ranks, from the file's directory (Accelerate takes
// a relative deepspeed_config_file from the current directory; the corpus runs from
// testdata/dialects/deepspeed, where the ALST recipe's JSON lies).
std::string apply(TrainConfig& c, const std::string& rel,
                  std::vector<DialectEntry>* entries = nullptr) {
  const fs::path before = fs::current_path();
  fs::current_path(kDir + "/deepspeed");
  std::string error = braid::testing::error_of([&] {
    auto got = rel.rfind("deepspeed/", 0) == 0 ? load_deepspeed_config(c, kDir + "/" + rel, 2)
                                               : load_accelerate_config(c, kDir + "/" + rel, 2);
    if (entries) *entries = got;
  });
  fs::current_path(before);
  return error == "(no error)" ? "" : error;
}

TEST(DialectCorpus, EveryFileDoesWhatItsToolDoes) {
  const auto expected = read_expected();
  int files = 0;
  for (const char* dir : {"deepspeed", "accelerate"}) {
    for (const auto& e : fs::directory_iterator(kDir + "/" + dir)) {
      const std::string rel = std::string(dir) + "/" + e.path().filename().string();
      ++files;
      SCOPED_TRACE(rel);
      TrainConfig c = yaml();
      const std::string error = apply(c, rel);
      if (std::getenv("BRAID_CORPUS_PRINT")) {  // to write EXPECTED's first draft by hand
        std::printf("%s %s", rel.c_str(), error.empty() ? "ok" : ("ERR " + error).c_str());
        for (const auto& [k, v] : config_entries(c)) std::printf(" %s=%s", k.c_str(), v.c_str());
        std::printf("\n");
        continue;
      }
      auto it = expected.find(rel);
      ASSERT_NE(it, expected.end()) << "no line in testdata/dialects/EXPECTED";
      const Expected& x = it->second;
      if (x.verdict == "refused") {
        EXPECT_NE(error.find(e.path().filename().string()), std::string::npos) << error;
        EXPECT_NE(error.find(x.key), std::string::npos) << error;
        continue;
      }
      ASSERT_EQ(x.verdict, "ok");
      ASSERT_EQ(error, "");
      const auto entries = config_entries(c);
      std::map<std::string, std::string> got(entries.begin(), entries.end());
      for (const auto& [k, v] : x.values) {
        ASSERT_TRUE(got.count(k)) << k;
        EXPECT_EQ(got[k], v) << k;
      }
    }
  }
  EXPECT_GE(files, 40);
  EXPECT_EQ(static_cast<size_t>(files), expected.size()) << "EXPECTED names a file not there";
}

// Every value a corpus file changes says, in --print-config, which file changed it: no mapping
// changes a value without a note naming the braid key (provenance.h).
TEST(DialectCorpus, EveryChangedValueNamesItsFile) {
  int checked = 0;
  for (const char* dir : {"deepspeed", "accelerate"}) {
    for (const auto& e : fs::directory_iterator(kDir + "/" + dir)) {
      const std::string rel = std::string(dir) + "/" + e.path().filename().string();
      SCOPED_TRACE(rel);
      Provenance origins;
      TrainConfig c = yaml(&origins);
      const auto before = config_entries(c);
      std::vector<DialectEntry> entries;
      if (!apply(c, rel, &entries).empty()) continue;  // refused
      origins.add(entries);
      const auto after = config_entries(c);
      for (size_t i = 0; i < after.size(); ++i) {
        if (after[i].second == before[i].second) continue;
        const std::string origin = origins.of(after[i].first);
        EXPECT_TRUE(origin.rfind("x.yaml", 0) != 0 && origin != "braid default")
            << after[i].first << ": " << before[i].second << " -> " << after[i].second << " says "
            << origin;
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 100);
}

// Every corpus file is named in SOURCES with its repository, path and commit.
TEST(DialectCorpus, EveryFileHasItsSource) {
  std::ifstream in(kDir + "/SOURCES");
  std::set<std::string> named;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream is(line);
    std::string file, repo, path, commit;
    is >> file >> repo >> path >> commit;
    EXPECT_EQ(commit.size(), 40u) << line;
    named.insert(file);
  }
  for (const char* dir : {"deepspeed", "accelerate"})
    for (const auto& e : fs::directory_iterator(kDir + "/" + dir))
      EXPECT_TRUE(named.count(std::string(dir) + "/" + e.path().filename().string())) << e.path();
}

}  // namespace
}  // namespace braid::config
