#include "braid/data/token_dataset.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "braid/core/error.h"
#include "braid/data/token_flags.h"

namespace braid::data {

TokenDataset::TokenDataset(const std::vector<std::string>& shard_paths, int64_t window,
                           int64_t stride, int64_t vocab_size)
    : window_(window), stride_(stride), vocab_size_(vocab_size) {
  BRAID_CHECK(!shard_paths.empty(), "TokenDataset: no shard files given");
  BRAID_CHECK(window >= 2, "TokenDataset: window ", window, " must be at least 2 tokens");
  BRAID_CHECK(stride >= 1, "TokenDataset: stride ", stride, " must be at least 1");
  BRAID_CHECK(vocab_size >= 0, "TokenDataset: vocab size ", vocab_size, " is negative");
  shards_.reserve(shard_paths.size());
  int64_t header_vocab = 0;
  for (const auto& p : shard_paths) {
    shards_.emplace_back(p);
    starts_.push_back(total_tokens_);
    total_tokens_ += shards_.back().size();
    header_vocab = std::max(header_vocab, shards_.back().vocab_size());
  }
  starts_.push_back(total_tokens_);
  if (vocab_size_ == 0) vocab_size_ = header_vocab;
  // Flag shards: beside every shard or none (Note [Token flags]).
  namespace fs = std::filesystem;
  const bool flagged = fs::exists(flags_path(shard_paths.front()));
  for (const auto& p : shard_paths) {
    const std::string f = flags_path(p);
    const std::string first = flags_path(shard_paths.front());
    BRAID_CHECK(fs::exists(f) == flagged, "token shards: '", flagged ? first : f, "' exists but '",
                flagged ? f : first,
                "' does not: a dataset has flag shards beside every shard or none");
    if (!flagged) continue;
    flags_.emplace_back(f);
    const TokenShard& fl = flags_.back();
    const TokenShard& sh = shards_[flags_.size() - 1];
    BRAID_CHECK(fl.size() == sh.size(), "flag shard '", f, "' holds ", fl.size(),
                " values for the ", sh.size(), " tokens of '", p, "'");
    BRAID_CHECK(fl.vocab_size() <= kFlagValues, "flag shard '", f, "': vocab size ",
                fl.vocab_size(), " at offset 24, expected at most ", kFlagValues);
  }
  if (total_tokens_ >= window_) num_samples_ = (total_tokens_ - window_) / stride_ + 1;
  BRAID_CHECK(num_samples_ > 0, "TokenDataset: ", shard_paths.size(), " shard(s) starting with '",
              shard_paths.front(), "' hold ", total_tokens_, " tokens, fewer than one window of ",
              window_);
}

TokenDataset::RowLayout TokenDataset::row_layout(const std::string& dir) {
  const std::filesystem::path meta = std::filesystem::path(dir) / "meta.json";
  RowLayout out;
  if (!std::filesystem::exists(meta)) return out;
  std::ifstream in(meta);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    BRAID_THROW("'", meta.string(), "' is not valid JSON: ", e.what());
  }
  if (!j.is_object()) return out;
  if (j.contains("row_tokens")) {
    BRAID_CHECK(j["row_tokens"].is_number_integer() && j["row_tokens"].get<int64_t>() >= 2, "'",
                meta.string(), "': row_tokens must be an integer of at least 2, got ",
                j["row_tokens"].dump());
    out.row_tokens = j["row_tokens"].get<int64_t>();
  }
  out.packed = j.contains("instruct") && j["instruct"].is_object() &&
               j["instruct"].value("layout", std::string()) == "pack";
  return out;
}

std::vector<std::string> TokenDataset::find_shards(const std::string& dir,
                                                   const std::string& split) {
  namespace fs = std::filesystem;
  BRAID_CHECK(fs::is_directory(dir), "TokenDataset: '", dir, "' is not a directory");
  std::vector<std::string> out;
  const std::string prefix = split + "_";
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (e.is_regular_file() && name.rfind(prefix, 0) == 0 && e.path().extension() == ".bin") {
      out.push_back(e.path().string());
    }
  }
  std::sort(out.begin(), out.end());
  BRAID_CHECK(!out.empty(), "TokenDataset: no '", prefix, "*.bin' shards in '", dir, "'");
  return out;
}

void TokenDataset::read_sample(int64_t i, int32_t* out, int32_t* flags) const {
  BRAID_CHECK(i >= 0 && i < num_samples_, "TokenDataset: sample ", i, " outside [0, ", num_samples_,
              ")");
  read_window(shards_, i * stride_, out, vocab_size_);
  if (flags && has_flags()) read_window(flags_, i * stride_, flags, kFlagValues);
}

void TokenDataset::read_window(const std::vector<TokenShard>& shards, int64_t pos, int32_t* out,
                               int64_t limit) const {
  int64_t left = window_;
  // The shard holding pos: the last start <= pos (skipping empty shards).
  auto s = static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), pos) -
                               starts_.begin() - 1);
  while (left > 0) {
    const TokenShard& shard = shards[s];
    const int64_t offset = pos - starts_[s];
    const int64_t n = std::min(left, shard.size() - offset);
    if (n > 0) {
      shard.read(offset, n, out);
      for (int64_t k = 0; k < n; ++k) {
        BRAID_CHECK(out[k] >= 0 && out[k] < limit, "token shard '", shard.path(), "': token ",
                    out[k], " at token offset ", offset + k, " is outside [0, ", limit,
                    limit == kFlagValues ? ") (the flag values)" : ") (the vocabulary size)");
      }
      out += n;
      left -= n;
      pos += n;
    }
    ++s;
  }
}

}  // namespace braid::data
