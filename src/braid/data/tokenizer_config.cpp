#include "braid/data/tokenizer_config.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "braid/core/error.h"
#include "braid/data/tokenizer.h"

namespace braid::data {

namespace {
using nlohmann::json;

// A special token: a string or {"content": ...}.
std::string token_of(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) {
    return v["content"].get<std::string>();
  }
  return "";
}

std::optional<bool> flag(const json& c, const char* key) {
  if (c.contains(key) && c[key].is_boolean()) return c[key].get<bool>();
  return std::nullopt;
}
}  // namespace

TokenizerConfig TokenizerConfig::parse(const std::string& text, const std::string& where) {
  TokenizerConfig cfg;
  if (text.empty()) return cfg;
  json c;
  try {
    c = json::parse(text);
  } catch (const json::exception& e) {
    BRAID_THROW("tokenizer: '", where, "' is not valid JSON: ", e.what());
  }
  BRAID_CHECK(c.is_object(), "tokenizer: '", where, "' is not a JSON object");
  cfg.present = true;
  try {
    for (auto [key, field] : {std::pair{"bos_token", &cfg.bos_token},
                              {"eos_token", &cfg.eos_token},
                              {"unk_token", &cfg.unk_token},
                              {"pad_token", &cfg.pad_token}}) {
      if (c.contains(key)) *field = token_of(c[key]);
    }
    if (c.contains("additional_special_tokens") && c["additional_special_tokens"].is_array()) {
      for (const auto& t : c["additional_special_tokens"]) {
        if (auto s = token_of(t); !s.empty()) cfg.additional_special_tokens.push_back(s);
      }
    }
    if (c.contains("tokenizer_class") && c["tokenizer_class"].is_string()) {
      cfg.tokenizer_class = c["tokenizer_class"].get<std::string>();
    }
    cfg.add_bos_token = flag(c, "add_bos_token");
    cfg.add_eos_token = flag(c, "add_eos_token");
    cfg.legacy = flag(c, "legacy");
    cfg.add_prefix_space = flag(c, "add_prefix_space");
    if (c.contains("added_tokens_decoder") && c["added_tokens_decoder"].is_object()) {
      for (const auto& [id, t] : c["added_tokens_decoder"].items()) {
        AddedToken a;
        a.content = t.at("content").get<std::string>();
        a.id = std::stoi(id);
        a.special = t.value("special", false);
        a.lstrip = t.value("lstrip", false);
        a.rstrip = t.value("rstrip", false);
        a.single_word = t.value("single_word", false);
        BRAID_CHECK(a.id >= 0 && !a.content.empty(), "tokenizer '", where,
                    "': added_tokens_decoder entry '", id, "' ('", a.content, "')");
        cfg.added_tokens.push_back(std::move(a));
      }
    }
  } catch (const json::exception& e) {
    BRAID_THROW("tokenizer '", where, "': unexpected JSON structure: ", e.what());
  } catch (const std::logic_error& e) {  // stoi
    BRAID_THROW("tokenizer '", where, "': added_tokens_decoder has a key that is not an id");
  }
  return cfg;
}

std::string tokenizer_config_beside(const std::string& tokenizer_path) {
  const auto path = std::filesystem::path(tokenizer_path).parent_path() / "tokenizer_config.json";
  return std::filesystem::exists(path) ? read_tokenizer_file(path.string()) : "";
}

}  // namespace braid::data
