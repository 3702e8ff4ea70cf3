// HfTokenizer: reading tokenizer.json and tokenizer_config.json into a Model.
//
// Note [Supported components]: what the tokenizer.json files of the families braid trains use
// (GPT-2, LLaMA-2/3, TinyLlama, Mistral, Qwen2/3, GPT-NeoX, SmolLM; GPT-4o's o200k too), each
// implemented as HF's `tokenizers` (Rust) does; parity with HF is tested on five real files
// (hf_tokenizer_parity_test.cpp). A component outside that set is refused by name rather than
// approximated, since a tokenizer that is slightly wrong trains a model on the wrong ids.
#include <algorithm>
#include <nlohmann/json.hpp>

#include "braid/core/error.h"
#include "braid/data/byte_unicode.h"
#include "braid/data/hf_tokenizer.h"
#include "braid/data/hf_tokenizer_model.h"
#include "braid/data/tokenizer.h"
#include "braid/data/tokenizer_config.h"

namespace braid::data {

namespace {
using nlohmann::json;

constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

struct Loader {
  HfTokenizer::Model& m;
  const std::string& where;

  [[noreturn]] void refuse(const std::string& component, const std::string& type,
                           const std::string& supported) const {
    BRAID_THROW("tokenizer '", where, "': ", component, " type '", type,
                "' is not supported (braid reads ", supported, ")");
  }

  static std::string type_of(const json& j) {
    return j.is_object() && j.contains("type") && j["type"].is_string()
               ? j["type"].get<std::string>()
               : std::string("?");
  }

  // A Split/Replace pattern: {"String": s} or {"Regex": r}.
  static std::pair<bool, std::string> pattern_of(const json& p) {
    if (p.contains("Regex")) return {true, p["Regex"].get<std::string>()};
    return {false, p.at("String").get<std::string>()};
  }

  int add_regex(const std::string& pattern) {
    try {
      Pretokenizer check(pattern);  // compile now: a bad pattern fails on load
    } catch (const Error& e) {
      BRAID_THROW("tokenizer '", where, "': pre-tokenizer regex does not compile: ", e.what());
    }
    m.regex_patterns.push_back(pattern);
    return static_cast<int>(m.regex_patterns.size()) - 1;
  }

  void normalizer(const json& j) {
    if (j.is_null()) return;
    const std::string t = type_of(j);
    const std::string supported = "NFC, Prepend, Replace with a string, Sequence";
    if (t == "Sequence") {
      for (const auto& n : j.at("normalizers")) normalizer(n);
    } else if (t == "NFC") {
      m.normalizers.push_back({HfNormalizer::kNfc, "", ""});
    } else if (t == "Prepend") {
      m.normalizers.push_back({HfNormalizer::kPrepend, j.at("prepend").get<std::string>(), ""});
    } else if (t == "Replace") {
      auto [is_regex, pattern] = pattern_of(j.at("pattern"));
      if (is_regex) refuse("normalizer", "Replace with a regex", supported);
      m.normalizers.push_back(
          {HfNormalizer::kReplace, pattern, j.at("content").get<std::string>()});
    } else {
      refuse("normalizer", t, supported);
    }
  }

  void pre_tokenizer(const json& j) {
    if (j.is_null()) return;
    const std::string t = type_of(j);
    HfPreTokenizer p{};
    if (t == "Sequence") {
      for (const auto& s : j.at("pretokenizers")) pre_tokenizer(s);
      return;
    } else if (t == "ByteLevel") {
      p.kind = HfPreTokenizer::kByteLevel;
      p.add_prefix_space = j.value("add_prefix_space", false);
      if (j.value("use_regex", true)) p.regex = add_regex(kGpt2Pattern);
      m.byte_level = true;
    } else if (t == "Split") {
      auto [is_regex, pattern] = pattern_of(j.at("pattern"));
      p.kind = is_regex ? HfPreTokenizer::kSplitRegex : HfPreTokenizer::kSplitString;
      if (is_regex) {
        p.regex = add_regex(pattern);
      } else {
        p.literal = pattern;
      }
      const std::string b = j.value("behavior", "Isolated");
      p.invert = j.value("invert", false);
      if (b == "Isolated") {
        p.behavior = HfPreTokenizer::kIsolated;
      } else if (b == "Removed") {
        p.behavior = HfPreTokenizer::kRemoved;
      } else if (b == "MergedWithPrevious" && !p.invert) {
        p.behavior = HfPreTokenizer::kMergedWithPrevious;
      } else if (b == "MergedWithNext" && !p.invert) {
        p.behavior = HfPreTokenizer::kMergedWithNext;
      } else {
        refuse("pre-tokenizer Split behavior", b + (p.invert ? " (inverted)" : ""),
               "Isolated, Removed, MergedWithPrevious, MergedWithNext");
      }
    } else if (t == "Digits") {
      p.kind = HfPreTokenizer::kDigits;
      p.individual_digits = j.value("individual_digits", false);
    } else if (t == "Metaspace") {
      p.kind = HfPreTokenizer::kMetaspace;
      p.literal = j.value("replacement", "\xE2\x96\x81");
      const std::string scheme = j.contains("prepend_scheme")
                                     ? j["prepend_scheme"].get<std::string>()
                                     : (j.value("add_prefix_space", true) ? "always" : "never");
      p.add_prefix_space = scheme != "never";
      p.prepend_first_only = scheme == "first";
      p.split = j.value("split", true);
    } else {
      refuse("pre-tokenizer", t, "ByteLevel, Split, Digits, Metaspace, Sequence");
    }
    m.pre_tokenizers.push_back(p);
  }

  void decoder(const json& j) {
    if (j.is_null()) return;
    const std::string t = type_of(j);
    HfDecoder d{};
    if (t == "Sequence") {
      for (const auto& s : j.at("decoders")) decoder(s);
      return;
    } else if (t == "ByteLevel") {
      d.kind = HfDecoder::kByteLevel;
    } else if (t == "Replace") {
      auto [is_regex, pattern] = pattern_of(j.at("pattern"));
      if (is_regex) refuse("decoder", "Replace with a regex", "Replace with a string");
      d = {HfDecoder::kReplace, pattern, j.at("content").get<std::string>()};
    } else if (t == "ByteFallback") {
      d.kind = HfDecoder::kByteFallback;
    } else if (t == "Fuse") {
      d.kind = HfDecoder::kFuse;
    } else if (t == "Strip") {
      d.kind = HfDecoder::kStrip;
      d.a = j.at("content").get<std::string>();
      d.start = j.value("start", 0);
      d.stop = j.value("stop", 0);
    } else if (t == "Metaspace") {
      d.kind = HfDecoder::kMetaspace;
      d.a = j.value("replacement", "\xE2\x96\x81");
      d.add_prefix_space = j.contains("prepend_scheme") ? j["prepend_scheme"] != "never"
                                                        : j.value("add_prefix_space", true);
    } else {
      refuse("decoder", t, "ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace, Sequence");
    }
    m.decoders.push_back(d);
  }

  int32_t id_of(const std::string& content, const char* what) const {
    if (int32_t id = m.added.id_of(content); id >= 0) return id;
    auto v = m.vocab.find(content);
    BRAID_CHECK(v != m.vocab.end(), "tokenizer '", where, "': ", what, " '", content,
                "' is not a token");
    return v->second;
  }

  void post_processor(const json& j) {
    if (j.is_null()) return;
    const std::string t = type_of(j);
    if (t == "Sequence") {
      for (const auto& p : j.at("processors")) post_processor(p);
    } else if (t == "ByteLevel") {
      // Offsets only.
    } else if (t == "TemplateProcessing") {
      bool after = false;
      for (const auto& piece : j.at("single")) {
        if (piece.contains("Sequence")) {
          after = true;
          continue;
        }
        const std::string name = piece.at("SpecialToken").at("id").get<std::string>();
        const auto& ids = j.at("special_tokens").at(name).at("ids");
        for (const auto& id : ids) (after ? m.suffix : m.prefix).push_back(id.get<int32_t>());
      }
    } else if (t == "RobertaProcessing" || t == "BertProcessing") {
      m.prefix = {j.at("cls").at(1).get<int32_t>()};
      m.suffix = {j.at("sep").at(1).get<int32_t>()};
    } else {
      refuse("post-processor", t,
             "TemplateProcessing, ByteLevel, RobertaProcessing, BertProcessing, Sequence");
    }
  }

  void model(const json& j) {
    const std::string t = type_of(j);
    if (t != "BPE") {
      BRAID_THROW("tokenizer '", where, "': model type '", t,
                  "' is not supported (braid reads BPE tokenizers: byte-level as GPT-2, LLaMA-3 "
                  "and Qwen, or SentencePiece-style with byte fallback as LLaMA-2 and Mistral)");
    }
    BRAID_CHECK(j.value("dropout", json()).is_null() || j["dropout"].get<double>() == 0,
                "tokenizer '", where, "': BPE dropout is not supported");
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
      BRAID_CHECK(j.value(key, json()).is_null() || j[key].get<std::string>().empty(),
                  "tokenizer '", where, "': BPE ", key, " is not supported");
    }
    m.byte_fallback = j.value("byte_fallback", false);
    m.fuse_unk = j.value("fuse_unk", false);
    m.ignore_merges = j.value("ignore_merges", false);

    const json& vocab = j.at("vocab");
    BRAID_CHECK(vocab.is_object(), "tokenizer '", where, "': model.vocab is not an object");
    HfStringMap<int32_t> spelt;  // as written in the file, for the merges
    spelt.reserve(vocab.size());
    int32_t max_id = -1;
    for (auto it = vocab.begin(); it != vocab.end(); ++it) {
      const auto id = it.value().get<int32_t>();
      BRAID_CHECK(id >= 0, "tokenizer '", where, "': token '", it.key(), "' has id ", id);
      spelt.emplace(it.key(), id);
      max_id = std::max(max_id, id);
    }
    m.token_text.resize(static_cast<size_t>(max_id) + 1);
    m.vocab.reserve(vocab.size());
    for (const auto& [s, id] : spelt) {
      std::string text = s;
      if (m.byte_level) {
        try {
          text = unicode_string_to_bytes(s);
        } catch (const Error&) {
          // Not byte-spelt: an added token written into the vocabulary; kept as it is.
        }
      }
      m.token_text[id] = text;
      m.vocab.emplace(std::move(text), id);
    }
    if (m.byte_level) {
      for (int b = 0; b < 256; ++b) {
        auto it = m.vocab.find(std::string(1, static_cast<char>(b)));
        BRAID_CHECK(it != m.vocab.end(), "tokenizer '", where,
                    "': byte-level vocabulary has no token for byte ", b);
        m.byte_id[b] = it->second;
      }
    }
    m.fallback_id.fill(-1);
    if (m.byte_fallback) {
      for (int b = 0; b < 256; ++b) {
        char name[8];
        std::snprintf(name, sizeof(name), "<0x%02X>", b);
        if (auto it = spelt.find(std::string_view(name)); it != spelt.end()) {
          m.fallback_id[b] = it->second;
        }
      }
    }
    if (j.contains("unk_token") && j["unk_token"].is_string()) {
      auto it = spelt.find(j["unk_token"].get<std::string>());
      BRAID_CHECK(it != spelt.end(), "tokenizer '", where, "': unk_token '",
                  j["unk_token"].get<std::string>(), "' is not in the vocabulary");
      m.unk = it->second;
    }

    const json& merges = j.at("merges");
    m.merges.reserve(merges.size());
    for (size_t rank = 0; rank < merges.size(); ++rank) {
      std::string a, b;
      if (merges[rank].is_array()) {
        a = merges[rank].at(0).get<std::string>();
        b = merges[rank].at(1).get<std::string>();
      } else {
        const auto s = merges[rank].get<std::string>();
        const size_t sp = s.find(' ');
        BRAID_CHECK(sp != std::string::npos && s.find(' ', sp + 1) == std::string::npos,
                    "tokenizer '", where, "': merge ", rank, " '", s,
                    "' is not two tokens separated by a space");
        a = s.substr(0, sp);
        b = s.substr(sp + 1);
      }
      auto lookup = [&](const std::string& s) {
        auto it = spelt.find(s);
        BRAID_CHECK(it != spelt.end(), "tokenizer '", where, "': merge ", rank, " ('", a, " ", b,
                    "'): '", s, "' is not in the vocabulary");
        return it->second;
      };
      const int32_t left = lookup(a), right = lookup(b), merged = lookup(a + b);
      m.merges.add(left, right, static_cast<int32_t>(rank), merged);
    }
  }

  void added_tokens(const json& j) {
    if (j.is_null()) return;
    for (const auto& t : j) {
      AddedToken a;
      a.content = t.at("content").get<std::string>();
      a.id = t.at("id").get<int32_t>();
      a.special = t.value("special", false);
      a.lstrip = t.value("lstrip", false);
      a.rstrip = t.value("rstrip", false);
      a.single_word = t.value("single_word", false);
      BRAID_CHECK(a.id >= 0 && !a.content.empty(), "tokenizer '", where, "': added token '",
                  a.content, "' with id ", a.id);
      if (static_cast<size_t>(a.id) >= m.token_text.size()) m.token_text.resize(a.id + 1);
      // What HF's ByteLevel decoder gives for it: the bytes its characters stand for when they
      // all are byte-level characters, else its text.
      std::string text = a.content;
      if (m.byte_level) {
        try {
          text = unicode_string_to_bytes(a.content);
        } catch (const Error&) {
        }
      }
      m.token_text[a.id] = text;
      m.added.add(std::move(a));
    }
  }

  void config(const TokenizerConfig& c) {
    if (!c.present) {
      // No tokenizer_config.json: the template's first token as bos, GPT-2's eot as eos.
      if (!m.prefix.empty()) m.bos = m.prefix.front();
      for (const char* eos : {"<|endoftext|>", "</s>"}) {
        if (m.eos < 0) m.eos = m.added.id_of(eos);
      }
      return;
    }
    if (!c.bos_token.empty()) m.bos = id_of(c.bos_token, "bos_token");
    if (!c.eos_token.empty()) m.eos = id_of(c.eos_token, "eos_token");
    // As transformers' LlamaTokenizerFast (update_post_processor): where the config sets
    // add_bos_token / add_eos_token, they decide, replacing the file's template.
    if (c.add_bos_token) {
      m.prefix.clear();
      if (*c.add_bos_token) {
        BRAID_CHECK(m.bos >= 0, "tokenizer '", where, "': add_bos_token is set but no bos_token");
        m.prefix.push_back(m.bos);
      }
    }
    if (c.add_eos_token) {
      m.suffix.clear();
      if (*c.add_eos_token) {
        BRAID_CHECK(m.eos >= 0, "tokenizer '", where, "': add_eos_token is set but no eos_token");
        m.suffix.push_back(m.eos);
      }
    }
  }
};

json parse(const std::string& text, const std::string& where) {
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    BRAID_THROW("tokenizer: '", where, "' is not valid JSON: ", e.what());
  }
}

}  // namespace

HfTokenizer HfTokenizer::from_json(const std::string& tokenizer_json,
                                   const std::string& config_json, const std::string& where) {
  const json j = parse(tokenizer_json, where);
  const TokenizerConfig c = TokenizerConfig::parse(config_json, where + " (tokenizer_config)");
  BRAID_CHECK(j.is_object() && j.contains("model"), "tokenizer '", where,
              "' has no \"model\": not a Hugging Face tokenizer.json");
  auto m = std::make_shared<Model>();
  m->where = where;
  Loader l{*m, where};
  try {
    // The pre-tokenizer says whether the vocabulary is byte-level spelt; the model needs that.
    l.normalizer(j.value("normalizer", json()));
    l.pre_tokenizer(j.value("pre_tokenizer", json()));
    const json& dec = j.value("decoder", json());
    l.decoder(dec);
    const bool byte_level_decoder =
        std::any_of(m->decoders.begin(), m->decoders.end(),
                    [](const HfDecoder& d) { return d.kind == HfDecoder::kByteLevel; });
    BRAID_CHECK(byte_level_decoder == m->byte_level, "tokenizer '", where,
                "': a ByteLevel decoder needs a ByteLevel pre-tokenizer and the other way round");
    l.model(j.at("model"));
    l.added_tokens(j.value("added_tokens", json()));
    l.post_processor(j.value("post_processor", json()));
    l.config(c);
  } catch (const json::exception& e) {
    BRAID_THROW("tokenizer '", where, "': unexpected JSON structure: ", e.what());
  }
  return HfTokenizer(std::move(m));
}

HfTokenizer HfTokenizer::from_file(const std::string& path) {
  return from_json(read_tokenizer_file(path), tokenizer_config_beside(path), path);
}

}  // namespace braid::data
