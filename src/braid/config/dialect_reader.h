// The typed reader behind braid's config dialects (deepspeed_config.cpp, accelerate_config.cpp):
// values by key path with ranges and "auto", notes of what each key became, and unknown keys as
// errors naming the closest known one.
#pragma once

#include <algorithm>
#include <cctype>
#include <climits>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "braid/config/closest_key.h"
#include "braid/config/deepspeed_config.h"
#include "braid/core/error.h"

namespace braid::config::dialect {

using json = nlohmann::json;

inline std::string show(const json& v) {
  std::string s = v.dump();
  return s.size() > 40 ? s.substr(0, 37) + "..." : s;
}

inline std::string format_number(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

// Reads one config of another tool's dialect (DeepSpeed's JSON; Accelerate's YAML, converted):
// every key asked for is remembered, so what is left over is unknown; every key read leaves a
// DialectEntry saying what it became.
class DialectReader {
 public:
  // tool: "DeepSpeed" or "Accelerate", for "absent: DeepSpeed's default" notes.
  DialectReader(const json& root, std::string source, std::string tool = "DeepSpeed")
      : root_(root), source_(std::move(source)), tool_(std::move(tool)) {}

  [[noreturn]] void fail(const std::string& key, const std::string& why) const {
    BRAID_THROW(source_, ": ", key, ": ", why);
  }
  [[noreturn]] void unsupported(const std::string& key, const std::string& why) const {
    BRAID_THROW(source_, ": ", key, ": not supported yet (", why, ")");
  }
  // What `key` became; the braid keys it set are the "section.key = value"s in effect.
  void note(const std::string& key, const std::string& effect) {
    add(key, effect, braid_keys_in(effect), DialectEntry::How::given, key);
  }
  // A key absent from a block the file gives: the other tool's own default holds, not the YAML's.
  void defaulted(const std::string& key, const std::string& effect) {
    add(key, "absent: " + tool_ + "'s default, " + effect, braid_keys_in(effect),
        DialectEntry::How::defaulted, "no " + key + ": " + tool_ + "'s default");
  }
  // A value worked out from others: `how` says the arithmetic ("global_batch_size = micro 4 x
  // accumulation 2 x dp 2").
  void derived(const std::string& key, const std::string& effect, const std::string& how) {
    add(key, effect + " (derived: " + how + ")", braid_keys_in(effect), DialectEntry::How::derived,
        "derived: " + how);
  }
  // Another reader's entries (a DeepSpeed config inside an Accelerate one), where they applied.
  void append(const std::vector<DialectEntry>& entries) {
    entries_.insert(entries_.end(), entries.begin(), entries.end());
  }
  // The braid keys an "auto" for each key of the dialect keeps (Note [What "auto" keeps]).
  void auto_keeps(std::map<std::string, std::vector<std::string>> keys) {
    auto_keeps_ = std::move(keys);
  }
  // The braid keys ("section.key") that effect sets: each known one followed by " = ".
  static std::vector<std::string> braid_keys_in(const std::string& effect) {
    static const std::set<std::string> known = [] {
      std::set<std::string> k;
      for (const auto& [key, value] : config_entries(TrainConfig{})) k.insert(key);
      return k;
    }();
    std::vector<std::string> keys;
    if (effect.rfind("ignored:", 0) == 0) return keys;
    for (size_t eq = effect.find(" = "); eq != std::string::npos; eq = effect.find(" = ", eq + 3)) {
      if (eq == 0) continue;
      const size_t before = effect.find_last_of(" ,(", eq - 1);
      const size_t start = before == std::string::npos ? 0 : before + 1;
      const std::string key = effect.substr(start, eq - start);
      if (known.count(key)) keys.push_back(key);
    }
    return keys;
  }

  // Keys of the dialect that this file's reading did not ask for (another distributed_type's
  // block): offered as the closest key to an unknown one, never accepted.
  void also_known(const std::vector<std::string>& keys) { hints_.insert(keys.begin(), keys.end()); }
  // Keys of a neighbouring tool (HF TrainingArguments) that users put in the wrong file: an
  // unknown one names the braid key that does the job.
  void foreign(const std::string& key, const std::string& hint) { foreign_[key] = hint; }

  // A block that is switched off or empty is absent, as the other tool reads it: no
  // `"enabled": true` anywhere inside (`{"enabled": false}`, `{}`, `{"x": {"enabled": false}}`);
  // a block that its tool switches on by being there (on_by_presence) is off only when empty.
  // Returns true (and notes it) when present and off; its contents are then not checked.
  bool switched_off(const std::string& key, bool on_by_presence = false) {
    const json* v = find(key);
    if (!v || !v->is_object()) return false;
    if (on_by_presence ? !v->empty() : enabled_inside(*v)) return false;
    note(key, v->empty() ? "absent: empty" : "absent: switched off (enabled false)");
    return true;
  }
  static bool enabled_inside(const json& v) {
    if (v.is_object()) {
      for (auto it = v.begin(); it != v.end(); ++it)
        if ((it.key() == "enabled" && it.value() == json(true)) || enabled_inside(it.value()))
          return true;
    } else if (v.is_array()) {
      for (const auto& e : v)
        if (enabled_inside(e)) return true;
    }
    return false;
  }

  // The value at "a.b.c", or nullptr when absent or null. Sections on the way must be objects.
  const json* find(const std::string& key) {
    known_.insert(key);
    const json* node = &root_;
    size_t start = 0;
    while (true) {
      const size_t dot = key.find('.', start);
      const std::string part = key.substr(start, dot == std::string::npos ? dot : dot - start);
      if (!node->is_object())
        fail(key.substr(0, start ? start - 1 : 0), "must be an object, got " + show(*node));
      auto it = node->find(part);
      if (it == node->end()) return nullptr;
      node = &*it;
      if (dot == std::string::npos) return node->is_null() ? nullptr : node;  // null: absent
      known_.insert(key.substr(0, dot));
      start = dot + 1;
    }
  }
  // "auto": the YAML's value holds (noted once per key).
  std::nullopt_t keep_yaml(const std::string& key) {
    if (auto_noted_.insert(key).second) {
      auto it = auto_keeps_.find(key);
      add(key, "auto: the YAML's value",
          it == auto_keeps_.end() ? std::vector<std::string>{} : it->second,
          DialectEntry::How::kept, key + " \"auto\": the YAML's value");
    }
    return std::nullopt;
  }
  bool is_auto(const json* v) const {
    return v && v->is_string() && v->get<std::string>() == "auto";
  }

  // An integer in [lo, hi]; nullopt when absent or "auto" (auto_ok).
  std::optional<int64_t> integer(const std::string& key, int64_t lo, int64_t hi,
                                 bool auto_ok = true) {
    const json* v = find(key);
    if (!v) return std::nullopt;
    if (auto_ok && is_auto(v)) return keep_yaml(key);
    const bool whole =
        v->is_number_integer() || v->is_number_unsigned() ||
        (v->is_number_float() && std::isfinite(v->get<double>()) &&
         v->get<double>() == std::floor(v->get<double>()) && std::fabs(v->get<double>()) < 9e18);
    if (!whole || v->is_boolean())
      fail(key,
           "must be an integer" + std::string(auto_ok ? " or \"auto\"" : "") + ", got " + show(*v));
    const auto x = v->is_number_float() ? static_cast<int64_t>(v->get<double>())
                   : v->is_number_unsigned() && v->get<uint64_t>() > INT64_MAX ? INT64_MAX
                                                                               : v->get<int64_t>();
    if (x < lo || x > hi)
      fail(key, "must be in [" + std::to_string(lo) + ", " +
                    (hi == INT64_MAX ? std::string("...") : std::to_string(hi)) + "], got " +
                    std::to_string(x));
    return x;
  }
  // A finite number in [lo, hi].
  std::optional<double> number(const std::string& key, double lo, double hi, bool auto_ok = true) {
    const json* v = find(key);
    if (!v) return std::nullopt;
    if (auto_ok && is_auto(v)) return keep_yaml(key);
    if (!v->is_number() || v->is_boolean())
      fail(key,
           "must be a number" + std::string(auto_ok ? " or \"auto\"" : "") + ", got " + show(*v));
    const double x = v->get<double>();
    if (!std::isfinite(x) || x < lo || x > hi)
      fail(key, "must be in [" + format_number(lo) + ", " +
                    (hi > 1e300 ? std::string("...") : format_number(hi)) + "], got " + show(*v));
    return x;
  }
  std::optional<bool> boolean(const std::string& key, bool auto_ok = true) {
    const json* v = find(key);
    if (!v) return std::nullopt;
    if (auto_ok && is_auto(v)) return keep_yaml(key);
    if (!v->is_boolean()) fail(key, "must be true or false, got " + show(*v));
    return v->get<bool>();
  }
  // One of `choices`, compared without case; returned as the matching choice.
  std::optional<std::string> choice(const std::string& key,
                                    const std::vector<std::string>& choices) {
    const json* v = find(key);
    if (!v) return std::nullopt;
    std::string list;
    for (const auto& c : choices) list += (list.empty() ? "" : ", ") + c;
    if (!v->is_string()) fail(key, "must be one of " + list + ", got " + show(*v));
    std::string got = v->get<std::string>();
    auto lower = [](std::string s) {
      for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      return s;
    };
    for (const auto& c : choices)
      if (lower(c) == lower(got)) return c;
    fail(key, "must be one of " + list + ", got \"" + got + "\"");
  }
  // A key braid reads but does not need: noted with why (any value).
  void ignore(const std::string& key, const std::string& why) {
    if (find(key)) note(key, "ignored: " + why);
  }
  // A section: must be an object when present.
  bool section(const std::string& key) {
    const json* v = find(key);
    if (v && !v->is_object()) fail(key, "must be an object, got " + show(*v));
    return v != nullptr;
  }

  // Every key of the file that was never asked for is an error naming the closest known one.
  void reject_unknown() const { walk(root_, ""); }

  std::vector<DialectEntry> entries() const { return entries_; }

 private:
  void add(const std::string& key, const std::string& effect, std::vector<std::string> sets,
           DialectEntry::How how, const std::string& origin) {
    entries_.push_back({key, effect, source_, std::move(sets), how, origin});
  }

  void walk(const json& node, const std::string& prefix) const {
    for (auto it = node.begin(); it != node.end(); ++it) {
      const std::string key = prefix.empty() ? it.key() : prefix + "." + it.key();
      if (!known_.count(key)) {
        auto f = prefix.empty() ? foreign_.find(key) : foreign_.end();
        if (f != foreign_.end()) BRAID_THROW(source_, ": unknown key '", key, "': ", f->second);
        std::vector<std::string> known(known_.begin(), known_.end());
        known.insert(known.end(), hints_.begin(), hints_.end());
        BRAID_THROW(source_, ": unknown key '", key, "'", did_you_mean(key, known));
      }
      const bool is_section = std::any_of(known_.begin(), known_.end(), [&](const std::string& k) {
        return k.size() > key.size() && k.compare(0, key.size() + 1, key + ".") == 0;
      });
      if (is_section && it.value().is_object()) walk(it.value(), key);
    }
  }

  const json& root_;
  std::string source_;
  std::string tool_;
  std::set<std::string> known_;
  std::set<std::string> hints_;
  std::map<std::string, std::string> foreign_;
  std::set<std::string> auto_noted_;
  std::map<std::string, std::vector<std::string>> auto_keeps_;
  std::vector<DialectEntry> entries_;
};

// HF TrainingArguments' keys that a DeepSpeed or Accelerate file may carry by mistake, with the
// braid YAML key that does the job.
inline void add_training_arguments_hints(DialectReader& r) {
  static const std::pair<const char*, const char*> kKeys[] = {
      {"per_device_train_batch_size", "training.micro_batch_size"},
      {"per_device_eval_batch_size", "training.micro_batch_size"},
      {"learning_rate", "optimizer.lr"},
      {"num_train_epochs", "training.max_steps"},
      {"max_steps", "training.max_steps"},
      {"warmup_steps", "schedule.warmup_steps"},
      {"warmup_ratio", "schedule.warmup_steps"},
      {"lr_scheduler_type", "schedule.type"},
      {"weight_decay", "optimizer.weight_decay"},
      {"adam_beta1", "optimizer.beta1"},
      {"adam_beta2", "optimizer.beta2"},
      {"adam_epsilon", "optimizer.eps"},
      {"max_grad_norm", "optimizer.grad_clip"},
      {"gradient_checkpointing", "model.activation_checkpointing"},
      {"bf16", "training.precision: bf16"},
      {"fp16", "training.precision: fp16"},
      {"seed", "training.seed"},
      {"logging_steps", "training.log_interval"},
      {"eval_steps", "training.eval_interval"},
      {"save_steps", "checkpoint.interval"},
      {"save_total_limit", "checkpoint.keep_last"},
      {"output_dir", "output.dir"},
      {"model_name_or_path", "model.init_from"},
      {"max_seq_length", "data.seq_len"},
      {"optim", "optimizer.type"}};
  for (const auto& [key, braid_key] : kKeys)
    r.foreign(key, std::string("HF TrainingArguments' key, not ") + "this file's; in braid it is " +
                       braid_key + " in the braid YAML");
}

// apply_deepspeed_config on a parsed object (Accelerate's deepspeed_config block arrives as one).
std::vector<DialectEntry> apply_deepspeed_object(TrainConfig& cfg, const json& root,
                                                 const std::string& source, int64_t dp_size);

}  // namespace braid::config::dialect
