#include "braid/data/prepare_data.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <thread>

#include "braid/core/error.h"
#include "braid/data/document_reader.h"
#include "braid/data/encode_documents.h"
#include "braid/data/instruct.h"
#include "braid/data/token_flags.h"
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
    add(ids);
  }
  // Tokens, and with flags (instruction rows: one per id) the flag shard beside each shard's.
  void add(const std::vector<int32_t>& ids, const std::vector<int32_t>* flags = nullptr) {
    summary_.tokens += static_cast<int64_t>(ids.size());
    size_t i = 0;
    while (i < ids.size()) {
      size_t n = std::min(ids.size() - i, static_cast<size_t>(shard_tokens_) - buf_.size());
      const auto b = static_cast<ptrdiff_t>(i), e = static_cast<ptrdiff_t>(i + n);
      buf_.insert(buf_.end(), ids.begin() + b, ids.begin() + e);
      if (flags) flags_.insert(flags_.end(), flags->begin() + b, flags->begin() + e);
      i += n;
      if (static_cast<int64_t>(buf_.size()) == shard_tokens_) flush();
    }
  }
  SplitSummary& summary() { return summary_; }
  void finish() {
    if (!buf_.empty()) flush();
  }

 private:
  void flush() {
    char name[64];
    std::snprintf(name, sizeof(name), "%s_%06zu.bin", split_.c_str(), summary_.shards.size());
    const std::string path = (fs::path(dir_) / name).string();
    write_token_shard(path, buf_, vocab_size_);
    if (!flags_.empty())
      write_token_shard(flags_path(path), flags_, kFlagValues, kTokenShardChunkBytes,
                        TokenDType::u8);
    summary_.shards.emplace_back(name);
    buf_.clear();
    flags_.clear();
  }

  std::string dir_, split_;
  int64_t shard_tokens_, vocab_size_;
  SplitSummary& summary_;
  std::vector<int32_t> buf_;
  std::vector<int32_t> flags_;
};

// Instruction examples into rows of row_tokens (Note [Token flags]), in order: an example
// longer than a row is cut to it; layout pad gives each example a row, pack (Note [Packed rows],
// nn/sequence_layout.h) appends it to the current row while it fits whole. A row's rest is
// padding with `pad` (flagged as an example start, then untrained).
class RowSink {
 public:
  RowSink(ShardSink& shards, int64_t row_tokens, int32_t pad, bool pack)
      : shards_(shards), row_(static_cast<size_t>(row_tokens)), pad_(pad), pack_(pack) {}

  void add_example(std::vector<int32_t>& ids, std::vector<int32_t>& flags) {
    SplitSummary& s = shards_.summary();
    if (ids.size() > row_) {
      ids.resize(row_);
      flags.resize(row_);
      s.truncated += 1;
    }
    for (int32_t f : flags) s.trained += (f & kFlagTarget) && !(f & kFlagSegmentStart);
    if (!ids_.empty() && (!pack_ || ids_.size() + ids.size() > row_)) finish();
    ids_.insert(ids_.end(), ids.begin(), ids.end());
    flags_.insert(flags_.end(), flags.begin(), flags.end());
    s.documents += 1;
  }
  void finish() {
    if (ids_.empty()) return;
    if (ids_.size() < row_) {
      flags_.push_back(kFlagSegmentStart);
      flags_.resize(row_, 0);
      ids_.resize(row_, pad_);
    }
    shards_.add(ids_, &flags_);
    shards_.summary().rows += 1;
    ids_.clear();
    flags_.clear();
  }

 private:
  ShardSink& shards_;
  size_t row_;
  int32_t pad_;
  bool pack_;
  std::vector<int32_t> ids_, flags_;  // the row being filled
};

json split_json(const SplitSummary& s, bool instruct) {
  json j = {{"documents", s.documents}, {"tokens", s.tokens}, {"shards", s.shards}};
  if (instruct) {
    j["rows"] = s.rows;
    j["truncated"] = s.truncated;
    j["trained_tokens"] = s.trained;
  }
  return j;
}

}  // namespace

std::vector<std::string> list_text_files(const std::vector<std::string>& inputs) {
  BRAID_CHECK(!inputs.empty(), "prepare-data: no inputs given");
  std::vector<std::string> files;
  for (const auto& in : inputs) {
    if (fs::is_directory(in)) {
      std::vector<std::string> found;
      for (const auto& e : fs::recursive_directory_iterator(in)) {
        const std::string path = e.path().string();
        const std::string_view name = strip_compression(path);
        if (e.is_regular_file() && (name.ends_with(".txt") || name.ends_with(".jsonl"))) {
          found.push_back(path);
        }
      }
      BRAID_CHECK(!found.empty(), "prepare-data: directory '", in,
                  "' holds no .txt or .jsonl files (nor .gz or .zst ones)");
      std::sort(found.begin(), found.end());
      files.insert(files.end(), found.begin(), found.end());
    } else {
      BRAID_CHECK(fs::is_regular_file(in), "prepare-data: input '", in,
                  "' is neither a file nor a directory");
      const std::string ext = fs::path(std::string(strip_compression(in))).extension().string();
      for (const char* other : {".bz2", ".xz", ".lz4", ".zip", ".tar", ".parquet", ".arrow"}) {
        BRAID_CHECK(ext != other, "prepare-data: input '", in, "': ", other,
                    " files are not read; give plain text or JSONL, or their .gz or .zst");
      }
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

namespace {

// Documents in each file, counted on `threads` threads (JSONL files are read through).
std::vector<int64_t> count_documents(const std::vector<std::string>& files, int threads) {
  std::vector<int64_t> counts(files.size());
  std::atomic<size_t> next{0};
  std::mutex mu;
  std::exception_ptr error;
  auto count = [&] {
    for (size_t i; (i = next++) < files.size();) {
      try {
        counts[i] = DocumentReader::count(files[i]);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (!error) error = std::current_exception();
        next = files.size();
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(count);
  count();
  for (auto& t : pool) t.join();
  if (error) std::rethrow_exception(error);
  return counts;
}

// Note [Nothing half-written]: the shards in staging replace out_dir's, meta.json last.
void publish(const fs::path& staging, const std::string& out_dir, const std::string& meta_path,
             const std::string& meta) {
  fs::remove(meta_path);
  for (const auto& e : fs::directory_iterator(out_dir)) {
    const std::string name = e.path().filename().string();
    if ((name.starts_with("train_") || name.starts_with("val_")) &&
        (e.path().extension() == ".bin" || e.path().extension() == ".flags" ||
         e.path().extension() == ".tmp")) {
      fs::remove(e.path());
    }
  }
  for (const auto& e : fs::directory_iterator(staging)) {
    fs::rename(e.path(), fs::path(out_dir) / e.path().filename());
  }
  write_atomically(meta_path, meta);
  fs::remove(staging);
}

}  // namespace

PrepareDataResult prepare_data(const PrepareDataOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  BRAID_CHECK(o.shard_tokens >= 1, "prepare-data: shard size ", o.shard_tokens,
              " tokens must be at least 1");
  BRAID_CHECK(!o.out_dir.empty(), "prepare-data: no output directory given");
  BRAID_CHECK(!o.field.empty(), "prepare-data: the JSONL field name is empty");
  const std::vector<std::string> files = list_text_files(o.inputs);
  const bool instruct = !o.chat_template.empty();
  std::optional<ChatTemplate> chat;
  int64_t shard_tokens = o.shard_tokens;
  if (instruct) {
    chat = chat_template_from_name(o.chat_template);
    BRAID_CHECK(o.seq_len >= 1,
                "prepare-data: instruction data is laid out in rows of seq_len + 1 "
                "tokens: give --seq-len (the data.seq_len it will train with)");
    BRAID_CHECK(o.layout == "pad" || o.layout == "pack", "prepare-data: layout '", o.layout,
                "' is not pad (one example a row) or pack (several examples a row, attending "
                "each to itself only)");
    for (const auto& f : files)
      BRAID_CHECK(document_format_of(f) == DocumentFormat::jsonl, "prepare-data: '", f,
                  "' is not JSONL: instruction data is one example a JSONL line");
    // Shards hold whole rows.
    shard_tokens = std::max<int64_t>(1, o.shard_tokens / (o.seq_len + 1)) * (o.seq_len + 1);
  }

  PrepareDataResult result;
  json source = {{"tokenizer_dir", fs::absolute(o.tokenizer_dir).lexically_normal().string()},
                 {"val_fraction", o.val_fraction},
                 {"shard_tokens", o.shard_tokens}};
  bool any_jsonl = false;
  for (const auto& f : files) {
    const auto bytes = static_cast<int64_t>(fs::file_size(f));
    result.input_bytes += bytes;
    source["files"].push_back(
        {{"path", fs::absolute(f).lexically_normal().string()}, {"bytes", bytes}});
    any_jsonl = any_jsonl || document_format_of(f) == DocumentFormat::jsonl;
  }
  // Only where it matters, so that text-only outputs of earlier versions stay up to date.
  if (any_jsonl && !instruct) source["field"] = o.field;
  if (instruct) {
    source["chat_template"] = o.chat_template;
    source["seq_len"] = o.seq_len;
    source["layout"] = o.layout;
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
      summary->rows = old[split].value("rows", int64_t{0});
      summary->truncated = old[split].value("truncated", int64_t{0});
      summary->trained = old[split].value("trained_tokens", int64_t{0});
      for (const auto& s : summary->shards)
        complete = complete && fs::exists(fs::path(o.out_dir) / s) &&
                   (!instruct || fs::exists(flags_path((fs::path(o.out_dir) / s).string())));
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
  if (instruct) check_template_tokens(*chat, *tokenizer);

  const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  const int threads = o.threads > 0 ? o.threads : cores;
  int64_t n = 0;
  for (int64_t c : count_documents(files, threads)) n += c;
  BRAID_CHECK(n > 0, "prepare-data: the inputs hold no documents (every JSONL line is blank)");
  const std::vector<int64_t> val_docs = validation_documents(n, o.val_fraction);
  result.threads = static_cast<int>(std::min<int64_t>(threads, n));

  const bool made_out_dir = !fs::exists(o.out_dir);
  fs::create_directories(o.out_dir);
  const fs::path staging = fs::path(o.out_dir) / ".prepare-data.tmp";
  fs::remove_all(staging);  // what a killed run left
  fs::create_directories(staging);
  try {
    ShardSink train(staging.string(), "train", shard_tokens, result.vocab_size, result.train);
    ShardSink val(staging.string(), "val", shard_tokens, result.vocab_size, result.val);
    const bool pack = o.layout == "pack";
    RowSink train_rows(train, o.seq_len + 1, separator, pack),
        val_rows(val, o.seq_len + 1, separator, pack);
    size_t next_val = 0;
    PrepareProgress progress{.file_bytes_total = result.input_bytes, .documents_total = n};
    EncodeDocumentsOptions eo;
    eo.field = o.field;
    eo.separator = separator;
    eo.threads = result.threads;
    if (instruct) {
      eo.field = "";  // the whole line: an example
      eo.encode = [t = *chat](std::string_view line, Tokenizer& tok, EncodedDocument& out) {
        EncodedExample e = encode_example(parse_instruct_example(line), t, tok);
        out.ids = std::move(e.ids);
        out.flags = std::move(e.flags);
      };
    }
    encode_documents(files, *tokenizer, eo, [&](EncodedDocument& doc) {
      BRAID_CHECK(doc.index < n, "prepare-data: the inputs changed while being read (counted ", n,
                  " documents, then found more)");
      const bool is_val = next_val < val_docs.size() && val_docs[next_val] == doc.index;
      if (instruct)
        (is_val ? val_rows : train_rows).add_example(doc.ids, doc.flags);
      else
        (is_val ? val : train).add_document(doc.ids);
      next_val += is_val;
      progress.documents = doc.index + 1;
      progress.file_bytes = doc.file_bytes_done;
      progress.text_bytes += doc.text_bytes;
      progress.tokens += static_cast<int64_t>(doc.ids.size());
      if (o.progress) o.progress(progress);
    });
    BRAID_CHECK(progress.documents == n,
                "prepare-data: the inputs changed while being read "
                "(counted ",
                n, " documents, then read ", progress.documents, ")");
    train_rows.finish();
    val_rows.finish();
    train.finish();
    val.finish();
    result.text_bytes = progress.text_bytes;
  } catch (...) {
    std::error_code ec;
    fs::remove_all(staging, ec);
    if (made_out_dir) fs::remove(o.out_dir, ec);  // only if empty
    throw;
  }

  json meta = {
      {"format", "braid-token-shards"},
      {"version", kTokenShardVersion},
      {"tokenizer",
       {{"type", tokenizer->kind()}, {"vocab_size", result.vocab_size}, {"eot_id", separator}}},
      {"dtype", token_dtype_name(token_dtype_for_vocab(result.vocab_size))},
      {"document_separator", "eot_id before each document"},
      {"input_bytes", result.input_bytes},
      {"text_bytes", result.text_bytes},
      {"train", split_json(result.train, instruct)},
      {"val", split_json(result.val, instruct)},
      {"source", source}};
  if (instruct) {
    meta["document_separator"] = "each example a row, padded with eot_id";
    meta["row_tokens"] = o.seq_len + 1;
    meta["instruct"] = {{"chat_template", o.chat_template}, {"layout", o.layout}};
  }
  publish(staging, o.out_dir, result.meta_path, meta.dump(2) + "\n");
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return result;
}

}  // namespace braid::data
