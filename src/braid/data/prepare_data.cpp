#include "braid/data/prepare_data.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <thread>

#include "braid/core/error.h"
#include "braid/data/token_shard.h"
#include "braid/data/tokenizer.h"

namespace braid::data {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  BRAID_CHECK(in.good(), "prepare-data: cannot open '", path, "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    BRAID_CHECK(out.good(), "prepare-data: cannot write '", tmp, "'");
  }
  fs::rename(tmp, path);
}

// Cuts one split's token stream into shards named <split>_NNNNNN.bin.
class ShardSink {
 public:
  ShardSink(std::string dir, std::string split, int64_t shard_tokens, int64_t vocab_size,
            SplitSummary& summary)
      : dir_(std::move(dir)),
        split_(std::move(split)),
        shard_tokens_(shard_tokens),
        vocab_size_(vocab_size),
        summary_(summary) {}

  void add_document(const std::vector<int32_t>& ids) {
    summary_.documents += 1;
    summary_.tokens += static_cast<int64_t>(ids.size());
    size_t i = 0;
    while (i < ids.size()) {
      size_t n = std::min(ids.size() - i, static_cast<size_t>(shard_tokens_) - buf_.size());
      buf_.insert(buf_.end(), ids.begin() + static_cast<ptrdiff_t>(i),
                  ids.begin() + static_cast<ptrdiff_t>(i + n));
      i += n;
      if (static_cast<int64_t>(buf_.size()) == shard_tokens_) flush();
    }
  }
  void finish() {
    if (!buf_.empty()) flush();
  }

 private:
  void flush() {
    char name[64];
    std::snprintf(name, sizeof(name), "%s_%06zu.bin", split_.c_str(), summary_.shards.size());
    write_token_shard((fs::path(dir_) / name).string(), buf_, vocab_size_);
    summary_.shards.emplace_back(name);
    buf_.clear();
  }

  std::string dir_, split_;
  int64_t shard_tokens_, vocab_size_;
  SplitSummary& summary_;
  std::vector<int32_t> buf_;
};

json split_json(const SplitSummary& s) {
  return {{"documents", s.documents}, {"tokens", s.tokens}, {"shards", s.shards}};
}

}  // namespace

std::vector<std::string> list_text_files(const std::vector<std::string>& inputs) {
  BRAID_CHECK(!inputs.empty(), "prepare-data: no inputs given");
  std::vector<std::string> files;
  for (const auto& in : inputs) {
    if (fs::is_directory(in)) {
      std::vector<std::string> found;
      for (const auto& e : fs::directory_iterator(in)) {
        if (e.is_regular_file() && e.path().extension() == ".txt") found.push_back(e.path());
      }
      BRAID_CHECK(!found.empty(), "prepare-data: directory '", in, "' holds no .txt files");
      std::sort(found.begin(), found.end());
      files.insert(files.end(), found.begin(), found.end());
    } else {
      BRAID_CHECK(fs::is_regular_file(in), "prepare-data: input '", in,
                  "' is neither a file nor a directory");
      files.push_back(in);
    }
  }
  return files;
}

// Note [Validation split]: the k validation documents are those at (j + 1/2) n / k for
// j < k, spread evenly over the sorted inputs, so that for dated corpora (SOTU is sorted by
// year) validation covers every era rather than only the last one; it depends only on n.
std::vector<int64_t> validation_documents(int64_t n, double val_fraction) {
  BRAID_CHECK(val_fraction >= 0 && val_fraction < 1, "prepare-data: val fraction ", val_fraction,
              " outside [0, 1)");
  if (val_fraction == 0) return {};
  const int64_t k = std::max<int64_t>(1, std::llround(val_fraction * static_cast<double>(n)));
  BRAID_CHECK(k < n, "prepare-data: val fraction ", val_fraction, " of ", n,
              " documents leaves no training documents (need at least 2 documents)");
  std::vector<int64_t> out;
  for (int64_t j = 0; j < k; ++j) out.push_back((2 * j + 1) * n / (2 * k));
  return out;
}

PrepareDataResult prepare_data(const PrepareDataOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  BRAID_CHECK(o.shard_tokens >= 1, "prepare-data: shard size ", o.shard_tokens,
              " tokens must be at least 1");
  BRAID_CHECK(!o.out_dir.empty(), "prepare-data: no output directory given");
  const std::vector<std::string> files = list_text_files(o.inputs);
  const auto n = static_cast<int64_t>(files.size());
  const std::vector<int64_t> val_docs = validation_documents(n, o.val_fraction);

  PrepareDataResult result;
  json source = {{"tokenizer_dir", fs::absolute(o.tokenizer_dir).lexically_normal().string()},
                 {"val_fraction", o.val_fraction},
                 {"shard_tokens", o.shard_tokens}};
  std::vector<int64_t> file_bytes;
  for (const auto& f : files) {
    const auto bytes = static_cast<int64_t>(fs::file_size(f));
    file_bytes.push_back(bytes);
    result.input_bytes += bytes;
    source["files"].push_back(
        {{"path", fs::absolute(f).lexically_normal().string()}, {"bytes", bytes}});
  }

  result.meta_path = (fs::path(o.out_dir) / "meta.json").string();
  if (fs::exists(result.meta_path) && !o.force) {
    json old;
    try {
      old = json::parse(read_text(result.meta_path));
    } catch (const json::exception& e) {
      BRAID_THROW("prepare-data: '", result.meta_path, "' is not valid JSON (", e.what(),
                  "); pass --force to rebuild");
    }
    BRAID_CHECK(old.value("source", json()) == source, "prepare-data: '", o.out_dir,
                "' holds data prepared from other inputs or options (see its meta.json); pass "
                "--force to replace it");
    bool complete = true;
    result.vocab_size = old["tokenizer"]["vocab_size"];
    for (auto [split, summary] : {std::pair{"train", &result.train}, {"val", &result.val}}) {
      summary->documents = old[split]["documents"];
      summary->tokens = old[split]["tokens"];
      summary->shards = old[split]["shards"].get<std::vector<std::string>>();
      for (const auto& s : summary->shards)
        complete = complete && fs::exists(fs::path(o.out_dir) / s);
    }
    if (complete) {
      result.skipped = true;
      return result;
    }
    result.train = result.val = SplitSummary{};  // a shard is missing: rebuild
  }

  const std::unique_ptr<Tokenizer> tokenizer = Tokenizer::from_path(o.tokenizer_dir);
  const int32_t separator = document_separator(*tokenizer);
  BRAID_CHECK(separator >= 0, "prepare-data: tokenizer in '", o.tokenizer_dir,
              "' has no bos, <|endoftext|> or eos token to separate documents");
  result.vocab_size = tokenizer->vocab_size();

  fs::create_directories(o.out_dir);
  // Stale shards of an earlier run would be picked up by DataLoader::from_dir.
  fs::remove(result.meta_path);
  for (const auto& e : fs::directory_iterator(o.out_dir)) {
    const std::string name = e.path().filename().string();
    if ((name.rfind("train_", 0) == 0 || name.rfind("val_", 0) == 0) &&
        (e.path().extension() == ".bin" || e.path().extension() == ".tmp")) {
      fs::remove(e.path());
    }
  }

  // Workers tokenise documents into slots; this thread writes them in order. Workers stay at
  // most `window` documents ahead of the writer, which bounds memory on any corpus.
  const int threads = std::max(
      1, std::min<int>(
             o.threads > 0 ? o.threads : static_cast<int>(std::thread::hardware_concurrency()),
             static_cast<int>(n)));
  const int64_t window = 4 * threads;
  std::vector<std::optional<std::vector<int32_t>>> slots(static_cast<size_t>(n));
  std::mutex mu;
  std::condition_variable cv;
  int64_t next_doc = 0, written = 0;
  bool failed = false;
  std::exception_ptr error;

  auto worker = [&](std::unique_ptr<Tokenizer> tok) {
    while (true) {
      int64_t i;
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return failed || next_doc >= n || next_doc < written + window; });
        if (failed || next_doc >= n) return;
        i = next_doc++;
      }
      std::vector<int32_t> ids{separator};
      try {
        tok->encode(read_text(files[i]), ids);
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(mu);
        if (!failed) error = std::make_exception_ptr(Error(files[i] + ": " + e.what()));
        failed = true;
        cv.notify_all();
        return;
      }
      std::lock_guard<std::mutex> lock(mu);
      slots[i] = std::move(ids);
      cv.notify_all();
    }
  };
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back(worker, tokenizer->clone());

  try {
    ShardSink train(o.out_dir, "train", o.shard_tokens, result.vocab_size, result.train);
    ShardSink val(o.out_dir, "val", o.shard_tokens, result.vocab_size, result.val);
    size_t next_val = 0;
    int64_t done_bytes = 0;
    for (int64_t i = 0; i < n; ++i) {
      std::vector<int32_t> ids;
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return failed || slots[i].has_value(); });
        if (failed) break;
        ids = std::move(*slots[i]);
        slots[i].reset();
        written = i + 1;
      }
      cv.notify_all();
      const bool is_val = next_val < val_docs.size() && val_docs[next_val] == i;
      (is_val ? val : train).add_document(ids);
      next_val += is_val;
      done_bytes += file_bytes[i];
      if (o.progress) o.progress(done_bytes, result.input_bytes);
    }
    train.finish();
    val.finish();
  } catch (...) {
    std::lock_guard<std::mutex> lock(mu);
    if (!failed) error = std::current_exception();
    failed = true;
    cv.notify_all();
  }
  for (auto& t : pool) t.join();
  if (error) std::rethrow_exception(error);

  json meta = {
      {"format", "braid-token-shards"},
      {"version", kTokenShardVersion},
      {"tokenizer",
       {{"type", tokenizer->kind()}, {"vocab_size", result.vocab_size}, {"eot_id", separator}}},
      {"dtype", token_dtype_name(token_dtype_for_vocab(result.vocab_size))},
      {"document_separator", "eot_id before each document"},
      {"input_bytes", result.input_bytes},
      {"train", split_json(result.train)},
      {"val", split_json(result.val)},
      {"source", source}};
  write_atomically(result.meta_path, meta.dump(2) + "\n");
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return result;
}

}  // namespace braid::data
