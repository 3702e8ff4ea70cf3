#include "braid/nn/model_config.h"

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "braid/core/error.h"

namespace braid::nn {

namespace {

using json = nlohmann::json;

// Reads typed fields of one config.json, remembering which were consumed so the rest can be
// checked against the list of fields known not to matter.
class FieldReader {
 public:
  FieldReader(const json& j, std::string_view source) : j_(j), source_(source) {}
  const std::string& source() const { return source_; }

  bool has(const std::string& k) const { return j_.contains(k) && !j_.at(k).is_null(); }

  int64_t integer(const std::string& k, int64_t fallback, bool required = false) {
    used_.insert(k);
    if (!has(k)) {
      BRAID_CHECK(!required, source_, ": required field '", k, "' is missing");
      return fallback;
    }
    const json& v = j_.at(k);
    BRAID_CHECK(v.is_number_integer(), source_, ": field '", k, "' must be an integer, got ",
                v.dump());
    return v.get<int64_t>();
  }
  double number(const std::string& k, double fallback) {
    used_.insert(k);
    if (!has(k)) return fallback;
    const json& v = j_.at(k);
    BRAID_CHECK(v.is_number(), source_, ": field '", k, "' must be a number, got ", v.dump());
    return v.get<double>();
  }
  bool boolean(const std::string& k, bool fallback) {
    used_.insert(k);
    if (!has(k)) return fallback;
    const json& v = j_.at(k);
    BRAID_CHECK(v.is_boolean(), source_, ": field '", k, "' must be true or false, got ", v.dump());
    return v.get<bool>();
  }
  std::string string(const std::string& k, const std::string& fallback) {
    used_.insert(k);
    if (!has(k)) return fallback;
    const json& v = j_.at(k);
    BRAID_CHECK(v.is_string(), source_, ": field '", k, "' must be a string, got ", v.dump());
    return v.get<std::string>();
  }
  // A field whose only supported value is `want` (or absent / null).
  void require_value(const std::string& k, const json& want) {
    used_.insert(k);
    if (!has(k)) return;
    BRAID_CHECK(j_.at(k) == want, source_, ": field '", k, "' = ", j_.at(k).dump(),
                " is not supported (braid implements ", want.dump(), ")");
  }
  // An object-valued field (null when absent).
  const json* object(const std::string& k) {
    used_.insert(k);
    if (!has(k)) return nullptr;
    BRAID_CHECK(j_.at(k).is_object(), source_, ": field '", k, "' must be an object, got ",
                j_.at(k).dump());
    return &j_.at(k);
  }
  void ignore(std::initializer_list<const char*> keys) {
    for (const char* k : keys) used_.insert(k);
  }
  void reject_unknown() const {
    for (const auto& [k, v] : j_.items()) {
      (void)v;
      BRAID_CHECK(used_.count(k) > 0, source_, ": unknown field '", k, "'",
                  j_.contains("model_type")
                      ? " for model_type '" + j_.value("model_type", std::string("?")) + "'"
                      : std::string());
    }
  }

 private:
  const json& j_;
  std::string source_;
  std::set<std::string> used_;
};

// HF fields that carry no meaning for the forward/backward math.
void ignore_common(FieldReader& r) {
  // "dtype" is what transformers 4.56+ writes for "torch_dtype".
  r.ignore({"model_type", "architectures", "torch_dtype", "dtype", "transformers_version",
            "use_cache", "pad_token_id", "_name_or_path", "initializer_range", "id2label",
            "label2id", "tokenizer_class", "prefix", "task_specific_params", "output_attentions",
            "output_hidden_states", "return_dict", "problem_type", "gradient_checkpointing"});
}

ModelConfig parse_gpt2(FieldReader& r) {
  ModelConfig c;
  c.arch = ModelArch::gpt2;
  c.vocab_size = r.integer("vocab_size", 50257);
  c.max_seq_len = r.integer("n_positions", 1024);
  c.d_model = r.integer("n_embd", 768);
  c.n_layer = r.integer("n_layer", 12);
  c.n_head = r.integer("n_head", 12);
  c.n_kv_head = c.n_head;
  c.d_ff = r.integer("n_inner", 4 * c.d_model);
  c.norm_eps = r.number("layer_norm_epsilon", 1e-5);
  c.tie_word_embeddings = r.boolean("tie_word_embeddings", true);
  c.bos_token_id = r.integer("bos_token_id", -1);
  c.eos_token_id = r.integer("eos_token_id", -1);
  const std::string act = r.string("activation_function", "gelu_new");
  BRAID_CHECK(act == "gelu_new" || act == "gelu_pytorch_tanh" || act == "gelu_fast", r.source(),
              ": field 'activation_function' = \"", act,
              "\" is not supported (braid implements the tanh GELU: gelu_new)");
  r.require_value("scale_attn_weights", true);
  r.require_value("scale_attn_by_inverse_layer_idx", false);
  r.require_value("add_cross_attention", false);
  // Dropouts (braid trains without dropout), n_ctx (= n_positions in old configs), the
  // sequence-summary head fields and reorder_and_upcast_attn (f32 math either way).
  r.ignore({"attn_pdrop", "embd_pdrop", "resid_pdrop", "n_ctx", "summary_activation",
            "summary_first_dropout", "summary_proj_to_labels", "summary_type", "summary_use_proj",
            "reorder_and_upcast_attn", "output_past"});
  return c;
}

ModelConfig parse_llama(FieldReader& r) {
  ModelConfig c;
  c.arch = ModelArch::llama;
  c.vocab_size = r.integer("vocab_size", 32000);
  c.d_model = r.integer("hidden_size", 4096);
  c.d_ff = r.integer("intermediate_size", 11008);
  c.n_layer = r.integer("num_hidden_layers", 32);
  c.n_head = r.integer("num_attention_heads", 32);
  c.n_kv_head = r.integer("num_key_value_heads", c.n_head);
  c.norm_eps = r.number("rms_norm_eps", 1e-6);
  c.rope_theta = r.number("rope_theta", 10000.0);
  // transformers v5 writes rope_theta (and any scaling) inside "rope_parameters".
  if (const json* rope = r.object("rope_parameters")) {
    FieldReader p(*rope, r.source() + ": rope_parameters");
    p.require_value("rope_type", "default");
    const double theta = p.number("rope_theta", c.rope_theta);
    BRAID_CHECK(!r.has("rope_theta") || theta == c.rope_theta, r.source(),
                ": 'rope_theta' = ", c.rope_theta, " and 'rope_parameters.rope_theta' = ", theta,
                " disagree");
    c.rope_theta = theta;
    p.reject_unknown();
  }
  c.max_seq_len = r.integer("max_position_embeddings", 2048);
  c.tie_word_embeddings = r.boolean("tie_word_embeddings", false);
  c.bos_token_id = r.integer("bos_token_id", -1);
  c.eos_token_id = r.integer("eos_token_id", -1);
  r.require_value("hidden_act", "silu");
  r.require_value("attention_bias", false);
  r.require_value("mlp_bias", false);
  r.require_value("rope_scaling", nullptr);
  if (r.has("head_dim")) {
    const int64_t hd = r.integer("head_dim", 0);
    BRAID_CHECK(c.n_head > 0 && hd * c.n_head == c.d_model, r.source(), ": field 'head_dim' = ", hd,
                " is not supported: braid needs hidden_size / num_attention_heads = ",
                c.n_head > 0 ? c.d_model / c.n_head : 0);
  }
  r.ignore({"head_dim", "attention_dropout", "pretraining_tp", "max_sequence_length"});
  return c;
}

}  // namespace

CheckpointPolicy CheckpointPolicy::parse(std::string_view kind, int64_t interval) {
  CheckpointPolicy p;
  if (kind == "none" || kind == "false") {
    p.kind = Kind::none;
  } else if (kind == "full" || kind == "true") {
    p.kind = Kind::full;
  } else if (kind == "selective") {
    p.kind = Kind::selective;
  } else {
    BRAID_THROW("activation checkpointing: unknown policy '", kind,
                "' (expected none, false, full, true or selective)");
  }
  p.interval = interval;
  p.validate();
  return p;
}

std::string_view CheckpointPolicy::kind_name(Kind k) {
  switch (k) {
    case Kind::none:
      return "none";
    case Kind::full:
      return "full";
    case Kind::selective:
      return "selective";
  }
  return "?";
}

void CheckpointPolicy::validate() const {
  BRAID_CHECK(interval >= 1, "activation checkpointing (", kind_name(kind),
              "): interval must be >= 1 (every k-th block), got ", interval);
}

std::string CheckpointPolicy::str() const {
  std::string s(kind_name(kind));
  if (is_enabled() && interval != 1) s += " every " + std::to_string(interval);
  return s;
}

void ModelConfig::validate() const {
  const char* t = is_gpt2() ? "gpt2" : "llama";
  auto positive = [&](const char* field, int64_t v) {
    BRAID_CHECK(v > 0, "model config (", t, "): ", field, " must be positive, got ", v);
  };
  positive("vocab_size", vocab_size);
  positive("max_seq_len", max_seq_len);
  positive("d_model", d_model);
  positive("n_layer", n_layer);
  positive("n_head", n_head);
  positive("n_kv_head", n_kv_head);
  positive("d_ff", d_ff);
  BRAID_CHECK(d_model % n_head == 0, "model config (", t, "): d_model ", d_model,
              " is not divisible by n_head ", n_head);
  BRAID_CHECK(n_head % n_kv_head == 0, "model config (", t, "): n_head ", n_head,
              " is not a multiple of n_kv_head ", n_kv_head);
  BRAID_CHECK(is_llama() || n_kv_head == n_head, "model config (gpt2): n_kv_head ", n_kv_head,
              " must equal n_head ", n_head);
  BRAID_CHECK(is_gpt2() || head_size() % 2 == 0, "model config (llama): head size ", head_size(),
              " must be even for RoPE");
  BRAID_CHECK(norm_eps > 0 && std::isfinite(norm_eps), "model config (", t,
              "): norm_eps must be positive, got ", norm_eps);
  BRAID_CHECK(rope_theta > 0, "model config (", t, "): rope_theta must be positive, got ",
              rope_theta);
  activation_checkpointing.validate();
}

void ModelConfig::validate_tensor_parallel(int tp) const {
  const char* t = is_gpt2() ? "gpt2" : "llama";
  const char* key = "parallel.tensor_parallel_size";
  BRAID_CHECK(tp >= 1, key, " must be >= 1, got ", tp);
  BRAID_CHECK(n_head % tp == 0, "model config (", t, "): n_head ", n_head, " is not divisible by ",
              key, " ", tp, " (each rank holds whole attention heads)");
  BRAID_CHECK(n_kv_head % tp == 0 || tp % n_kv_head == 0, "model config (", t, "): n_kv_head ",
              n_kv_head, " and ", key, " ", tp,
              ": the kv heads are split when tp divides them and replicated when they divide tp, "
              "neither holds");
  BRAID_CHECK(d_ff % tp == 0, "model config (", t, "): d_ff ", d_ff, " is not divisible by ", key,
              " ", tp, " (the MLP's hidden columns are split)");
}

int64_t ModelConfig::num_parameters() const {
  const int64_t C = d_model, V = vocab_size, F = d_ff, L = n_layer;
  const int64_t KV = n_kv_head * head_size();
  int64_t n = V * C;                     // token embedding
  if (!tie_word_embeddings) n += V * C;  // separate LM head
  if (is_gpt2()) {
    n += max_seq_len * C;                           // learned positions
    const int64_t block = 2 * 2 * C                 // ln_1, ln_2 (weight + bias)
                          + C * 3 * C + 3 * C       // c_attn
                          + C * C + C               // attn.c_proj
                          + C * F + F + F * C + C;  // mlp c_fc, c_proj
    n += L * block + 2 * C;                         // + ln_f
  } else {
    const int64_t block = 2 * C                     // input / post-attention RMSNorm
                          + 2 * C * C + 2 * C * KV  // q, o and k, v projections
                          + 3 * C * F;              // gate, up, down
    n += L * block + C;                             // + final norm
  }
  return n;
}

double ModelConfig::flops_per_token(int64_t seq_len) const {
  int64_t matmul = num_parameters() - (is_gpt2() ? max_seq_len * d_model : 0);
  if (!tie_word_embeddings) matmul -= vocab_size * d_model;  // the lookup table
  return 6.0 * static_cast<double>(matmul) + 12.0 * static_cast<double>(n_layer) *
                                                 static_cast<double>(seq_len) *
                                                 static_cast<double>(d_model);
}

std::string ModelConfig::shape_key() const {
  std::string k = is_gpt2() ? "gpt2" : "llama";
  for (int64_t v : {vocab_size, max_seq_len, d_model, n_layer, n_head, n_kv_head, d_ff,
                    int64_t(tie_word_embeddings)}) {
    k += ":" + std::to_string(v);
  }
  return k;
}

std::string ModelConfig::summary() const {
  std::ostringstream os;
  os << model_type() << ": " << n_layer << " layers, " << n_head << " heads";
  if (n_kv_head != n_head) os << " (" << n_kv_head << " kv)";
  os << ", d_model " << d_model << ", d_ff " << d_ff << ", vocab " << vocab_size << ", max_seq_len "
     << max_seq_len << (tie_word_embeddings ? ", tied" : ", untied") << " embeddings, "
     << num_parameters() << " parameters";
  return os.str();
}

ModelConfig ModelConfig::from_hf_json(std::string_view text, std::string_view source) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    BRAID_THROW(source, ": not valid JSON: ", e.what());
  }
  BRAID_CHECK(j.is_object(), source, ": expected a JSON object");
  BRAID_CHECK(j.contains("model_type") && j["model_type"].is_string(), source,
              ": field 'model_type' (\"gpt2\" or \"llama\") is missing");
  const std::string type = j["model_type"].get<std::string>();
  FieldReader r(j, source);
  ModelConfig c;
  if (type == "gpt2") {
    c = parse_gpt2(r);
  } else if (type == "llama") {
    c = parse_llama(r);
  } else {
    BRAID_THROW(source, ": field 'model_type' = \"", type,
                "\" is not supported (braid implements \"gpt2\" and \"llama\")");
  }
  ignore_common(r);
  r.reject_unknown();
  try {
    c.validate();
  } catch (const Error& e) {
    BRAID_THROW(source, ": ", e.what());
  }
  return c;
}

ModelConfig ModelConfig::from_hf_file(const std::filesystem::path& path) {
  std::ifstream f(path);
  BRAID_CHECK(f.good(), "cannot open model config ", path.string());
  std::stringstream ss;
  ss << f.rdbuf();
  return from_hf_json(ss.str(), path.string());
}

std::string ModelConfig::to_hf_json() const {
  validate();
  nlohmann::ordered_json j;
  if (is_gpt2()) {
    j["activation_function"] = "gelu_new";
    j["architectures"] = {"GPT2LMHeadModel"};
    j["layer_norm_epsilon"] = norm_eps;
    j["model_type"] = "gpt2";
    j["n_ctx"] = max_seq_len;
    j["n_embd"] = d_model;
    j["n_head"] = n_head;
    j["n_inner"] = d_ff == 4 * d_model ? json(nullptr) : json(d_ff);
    j["n_layer"] = n_layer;
    j["n_positions"] = max_seq_len;
    j["scale_attn_weights"] = true;
  } else {
    j["architectures"] = {"LlamaForCausalLM"};
    j["attention_bias"] = false;
    j["hidden_act"] = "silu";
    j["hidden_size"] = d_model;
    j["intermediate_size"] = d_ff;
    j["max_position_embeddings"] = max_seq_len;
    j["mlp_bias"] = false;
    j["model_type"] = "llama";
    j["num_attention_heads"] = n_head;
    j["num_hidden_layers"] = n_layer;
    j["num_key_value_heads"] = n_kv_head;
    j["rms_norm_eps"] = norm_eps;
    j["rope_scaling"] = nullptr;
    j["rope_theta"] = rope_theta;
  }
  if (bos_token_id >= 0) j["bos_token_id"] = bos_token_id;
  if (eos_token_id >= 0) j["eos_token_id"] = eos_token_id;
  j["tie_word_embeddings"] = tie_word_embeddings;
  j["torch_dtype"] = "float32";
  j["vocab_size"] = vocab_size;
  return j.dump(2) + "\n";
}

void ModelConfig::save_hf_file(const std::filesystem::path& path) const {
  const std::string text = to_hf_json();
  std::ofstream f(path);
  BRAID_CHECK(f.good(), "cannot write model config ", path.string());
  f << text;
  f.flush();
  BRAID_CHECK(f.good(), "writing model config ", path.string(), " failed");
}

}  // namespace braid::nn
