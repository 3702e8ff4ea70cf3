#include "braid/data/instruct.h"

#include <nlohmann/json.hpp>

#include "braid/core/error.h"
#include "braid/data/token_flags.h"

namespace braid::data {

using nlohmann::json;

ChatTemplate chat_template_from_name(std::string_view name) {
  if (name == "plain") return ChatTemplate::plain;
  if (name == "chatml") return ChatTemplate::chatml;
  if (name == "llama3") return ChatTemplate::llama3;
  BRAID_THROW("chat template '", name, "' is not one of plain, chatml, llama3");
}

const char* chat_template_name(ChatTemplate t) {
  switch (t) {
    case ChatTemplate::plain:
      return "plain";
    case ChatTemplate::chatml:
      return "chatml";
    case ChatTemplate::llama3:
      return "llama3";
  }
  return "?";
}

namespace {

std::string string_field(const json& j, const char* key, const std::string& what) {
  const auto it = j.find(key);
  BRAID_CHECK(it != j.end(), what, " has no \"", key, "\" field");
  BRAID_CHECK(it->is_string(), what, "'s \"", key, "\" is ", it->type_name(), ", not a string");
  return it->get<std::string>();
}

}  // namespace

std::vector<ChatMessage> parse_instruct_example(std::string_view json_line) {
  json j;
  try {
    j = json::parse(json_line);
  } catch (const json::exception& e) {
    BRAID_THROW("not JSON: ", e.what());
  }
  BRAID_CHECK(j.is_object(), "the line holds ", j.type_name(), ", not a JSON object");
  std::vector<ChatMessage> out;
  if (j.contains("messages")) {
    const json& m = j["messages"];
    BRAID_CHECK(m.is_array() && !m.empty(), "\"messages\" must be a non-empty array, got ",
                m.type_name());
    bool trained = false;
    for (size_t i = 0; i < m.size(); ++i) {
      const std::string what = "message " + std::to_string(i);
      BRAID_CHECK(m[i].is_object(), what, " is ", m[i].type_name(), ", not an object");
      ChatMessage msg{string_field(m[i], "role", what), string_field(m[i], "content", what)};
      BRAID_CHECK(msg.role == "system" || msg.role == "user" || msg.role == "assistant", what,
                  " has role \"", msg.role, "\", not system, user or assistant");
      trained = trained || msg.role == "assistant";
      out.push_back(std::move(msg));
    }
    BRAID_CHECK(trained, "\"messages\" holds no assistant message: nothing to train on");
    return out;
  }
  BRAID_CHECK(j.contains("prompt") || j.contains("completion"),
              "the object has neither \"messages\" nor \"prompt\" and \"completion\"");
  out.push_back({"user", string_field(j, "prompt", "the example")});
  out.push_back({"assistant", string_field(j, "completion", "the example")});
  return out;
}

namespace {

std::string_view trim(std::string_view s) {
  constexpr std::string_view kSpace = " \t\n\r\f\v";
  const size_t b = s.find_first_not_of(kSpace);
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(kSpace) - b + 1);
}

int32_t required_token(const Tokenizer& tok, ChatTemplate t, const char* content) {
  const int32_t id = tok.special_token_id(content);
  BRAID_CHECK(id >= 0, "chat template ", chat_template_name(t), " needs the token ", content,
              ", which this tokenizer does not have (pick the template of the model's family, or "
              "plain)");
  return id;
}

// Appends ids with one flag value for all of them.
class ExampleBuilder {
 public:
  explicit ExampleBuilder(Tokenizer& tok) : tok_(tok) {}
  void token(int32_t id, bool trained) {
    out_.ids.push_back(id);
    out_.flags.push_back(trained ? kFlagTarget : 0);
  }
  void text(std::string_view s, bool trained) {
    tok_.encode_ordinary(s, out_.ids);
    out_.flags.resize(out_.ids.size(), trained ? kFlagTarget : 0);
  }
  EncodedExample finish() {
    BRAID_CHECK(!out_.ids.empty(), "the example encodes to no tokens");
    out_.flags[0] |= kFlagSegmentStart;
    return std::move(out_);
  }

 private:
  Tokenizer& tok_;
  EncodedExample out_;
};

}  // namespace

void check_template_tokens(ChatTemplate t, const Tokenizer& tok) {
  switch (t) {
    case ChatTemplate::plain:
      BRAID_CHECK(document_separator(tok) >= 0 && tok.eos_id() >= 0,
                  "chat template plain needs the tokenizer's eos and a bos or <|endoftext|>");
      break;
    case ChatTemplate::chatml:
      for (const char* c : {"<|im_start|>", "<|im_end|>"}) required_token(tok, t, c);
      break;
    case ChatTemplate::llama3:
      for (const char* c :
           {"<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"})
        required_token(tok, t, c);
      break;
  }
}

EncodedExample encode_example(const std::vector<ChatMessage>& messages, ChatTemplate t,
                              Tokenizer& tok) {
  ExampleBuilder b(tok);
  switch (t) {
    case ChatTemplate::plain:
      b.token(document_separator(tok), false);
      for (const ChatMessage& m : messages) {
        const bool assistant = m.role == "assistant";
        b.text(m.content, assistant);
        if (assistant) b.token(tok.eos_id(), true);
      }
      break;
    case ChatTemplate::chatml: {
      const int32_t start = required_token(tok, t, "<|im_start|>");
      const int32_t end = required_token(tok, t, "<|im_end|>");
      for (const ChatMessage& m : messages) {
        const bool assistant = m.role == "assistant";
        b.token(start, false);
        b.text(m.role + "\n", false);
        b.text(m.content, assistant);
        b.token(end, assistant);
        b.text("\n", false);
      }
      break;
    }
    case ChatTemplate::llama3: {
      b.token(required_token(tok, t, "<|begin_of_text|>"), false);
      const int32_t start = required_token(tok, t, "<|start_header_id|>");
      const int32_t end = required_token(tok, t, "<|end_header_id|>");
      const int32_t eot = required_token(tok, t, "<|eot_id|>");
      for (const ChatMessage& m : messages) {
        const bool assistant = m.role == "assistant";
        b.token(start, false);
        b.text(m.role, false);
        b.token(end, false);
        b.text("\n\n", false);
        b.text(trim(m.content), assistant);  // as Meta's template: content | trim
        b.token(eot, assistant);
      }
      break;
    }
  }
  return b.finish();
}

}  // namespace braid::data
