// Instruction data: prompt/completion and chat examples rendered through a role template into
// token ids and the flags of Note [Token flags] (token_flags.h), which braid prepare-data writes
// beside the token shards.
//
// An example is one JSONL line, either
//   {"prompt": "...", "completion": "..."}                      (the completion is trained), or
//   {"messages": [{"role": "system" | "user" | "assistant", "content": "..."}, ...]}
//                                                     (every assistant message is trained).
// Templates (no Jinja; each is the shape of the model family's chat format):
//   plain   <sep> prompt completion <eos> (concatenated as they are, as TRL does); messages as
//           their contents as they are, each assistant one followed by <eos>. Any tokenizer.
//   chatml  <|im_start|>role\ncontent<|im_end|>\n per message (Qwen, SmolLM); prompt/completion
//           as a user and an assistant message. Needs <|im_start|> and <|im_end|>. The generic
//           format: no default system prompt (Qwen2.5's, SmolLM2's templates add one) and no
//           <think> block (Qwen3's adds an empty one to the last assistant turn).
//   llama3  <|begin_of_text|> then <|start_header_id|>role<|end_header_id|>\n\ncontent<|eot_id|>
//           per message, content trimmed of surrounding whitespace: Meta's LLaMA-3 template.
//           Needs those four tokens.
// Trained: an assistant message's content and its end marker (<|im_end|>, <|eot_id|>, <eos>), or
// the completion and <eos>; never the markers that open a turn. Texts are encoded piece by piece
// without matching special tokens inside them (encode_ordinary), so a user's text cannot forge
// a turn. The first token of an example carries kFlagSegmentStart.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "braid/data/tokenizer.h"

namespace braid::data {

enum class ChatTemplate { plain, chatml, llama3 };

// "plain", "chatml" or "llama3"; anything else throws naming the choices.
ChatTemplate chat_template_from_name(std::string_view name);
const char* chat_template_name(ChatTemplate t);

struct ChatMessage {
  std::string role;  // system, user or assistant
  std::string content;
};

// One JSONL line's example; throws an Error saying what is wrong (the caller adds path:line).
std::vector<ChatMessage> parse_instruct_example(std::string_view json_line);

struct EncodedExample {
  std::vector<int32_t> ids;
  std::vector<int32_t> flags;  // Note [Token flags], one per id
};

// Checks that tok has the special tokens the template needs (throws naming the first missing).
void check_template_tokens(ChatTemplate t, const Tokenizer& tok);
// Renders and tokenises one example (check_template_tokens first).
EncodedExample encode_example(const std::vector<ChatMessage>& messages, ChatTemplate t,
                              Tokenizer& tok);

}  // namespace braid::data
