// Per-token flags beside token shards: what instruction data adds (Note [Token flags]).
//
// Note [Token flags]: a token shard <split>_NNNNNN.bin may have a flag shard beside it,
// <split>_NNNNNN.flags: a token shard (token_shard.h) of dtype u8 with one value per token of
// the .bin, a set of the bits below. A dataset has flag shards for every shard or for none. With
// them:
//   - the token at position t + 1 is the target of position t only when it is a trained token
//     (kFlagTarget: a completion's or an assistant turn's) and does not begin an example
//     (kFlagSegmentStart), so a prompt, a padding token or the next example's first token is
//     never predicted: the loader writes kIgnoreTarget there, and the loss counts only the rest;
//   - the loss of a step is the sum over its counted targets divided by their number over the
//     whole step (every micro-batch of every data-parallel rank), so it is the same token-
//     weighted mean under any strategy, accumulation and world size (Note [DDP averaging]).
// Such data is laid out in rows of row_tokens = seq_len + 1 tokens (meta.json's "row_tokens"),
// one sample a row: an example never straddles two samples.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

namespace braid::data {

constexpr int32_t kFlagTarget = 1;        // a trained token: predicting it is counted
constexpr int32_t kFlagSegmentStart = 2;  // begins an example (or a run of padding)
constexpr int64_t kFlagValues = 4;        // the flag shard's vocabulary
constexpr int32_t kIgnoreTarget = -100;   // a target the loss skips (ignore_index)

// "dir/train_000000.bin" -> "dir/train_000000.flags".
inline std::string flags_path(const std::string& shard_path) {
  return std::filesystem::path(shard_path).replace_extension(".flags").string();
}

}  // namespace braid::data
