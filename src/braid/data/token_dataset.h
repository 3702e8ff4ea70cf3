// TokenDataset: a list of token shards read as one stream of tokens, cut into samples: sample i
// is the window of window tokens starting at token i * stride (windows may span shards). With
// window = T + 1 and stride = T a sample gives a length-T input and its next-token targets.
// Where every shard has a flag shard beside it (Note [Token flags], token_flags.h) the flags of
// a sample's tokens are read with them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "braid/data/token_shard.h"

namespace braid::data {

class TokenDataset {
 public:
  // vocab_size 0 takes the largest of the shards' header vocab sizes; otherwise reads check
  // ids against it (a model may have a padded vocabulary, e.g. 50304 for GPT-2).
  TokenDataset(const std::vector<std::string>& shard_paths, int64_t window, int64_t stride,
               int64_t vocab_size = 0);

  // The files dir/<split>_*.bin, sorted ("train_000000.bin", ...); throws when there are none.
  static std::vector<std::string> find_shards(const std::string& dir, const std::string& split);
  // How dir's data is laid out, from its meta.json (Note [Token flags]): row_tokens, the length
  // of the rows data laid out one sample a row was written in (0: one stream of tokens, or no
  // meta.json); packed, whether the rows pack several examples (instruct layout "pack").
  struct RowLayout {
    int64_t row_tokens = 0;
    bool packed = false;
  };
  static RowLayout row_layout(const std::string& dir);

  int64_t num_samples() const { return num_samples_; }
  int64_t num_tokens() const { return total_tokens_; }
  int64_t window() const { return window_; }
  int64_t stride() const { return stride_; }
  int64_t vocab_size() const { return vocab_size_; }
  const std::vector<TokenShard>& shards() const { return shards_; }

  // Copies sample i's window tokens into out; an id >= vocab_size throws naming the shard
  // file and the token's offset in it.
  // With flags (and has_flags()), also the window's flags.
  void read_sample(int64_t i, int32_t* out, int32_t* flags = nullptr) const;
  bool has_flags() const { return !flags_.empty(); }

 private:
  void read_window(const std::vector<TokenShard>& shards, int64_t pos, int32_t* out,
                   int64_t limit) const;

  std::vector<TokenShard> shards_;
  std::vector<TokenShard> flags_;  // beside each shard, or none
  std::vector<int64_t> starts_;    // first stream token of each shard, plus the total at the end
  int64_t window_, stride_, vocab_size_ = 0, total_tokens_ = 0, num_samples_ = 0;
};

}  // namespace braid::data
