#include "braid/config/config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <climits>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <variant>
#include <vector>

#include "braid/config/closest_key.h"
#include "braid/config/duplicate_keys.h"
#include "braid/config/provenance.h"
#include "braid/core/error.h"
#include "braid/core/memory_tracker.h"

namespace braid::config {

namespace {

using FieldPtr = std::variant<std::string*, int64_t*, uint64_t*, double*, bool*>;

// Note [One field list]: every config field is named exactly once, here. Parsing,
// overrides and dumping all walk this list.
void visit_fields(TrainConfig& c, const std::function<void(const char*, FieldPtr)>& f) {
  f("model.preset", &c.model.preset);
  f("model.config", &c.model.config);
  f("model.init_from", &c.model.init_from);
  f("model.activation_checkpointing", &c.model.activation_checkpointing);
  f("model.activation_checkpointing_interval", &c.model.activation_checkpointing_interval);
  f("model.freeze", &c.model.freeze);
  f("data.train", &c.data.train);
  f("data.tokenizer", &c.data.tokenizer);
  f("data.seq_len", &c.data.seq_len);
  f("data.random_tokens", &c.data.random_tokens);
  f("data.vocab_size", &c.data.vocab_size);
  f("training.micro_batch_size", &c.training.micro_batch_size);
  f("training.gradient_accumulation_steps", &c.training.gradient_accumulation_steps);
  f("training.global_batch_size", &c.training.global_batch_size);
  f("training.max_steps", &c.training.max_steps);
  f("training.seed", &c.training.seed);
  f("training.log_interval", &c.training.log_interval);
  f("training.eval_interval", &c.training.eval_interval);
  f("training.eval_batches", &c.training.eval_batches);
  f("training.precision", &c.training.precision);
  f("training.resume", &c.training.resume);
  f("training.reduce_dtype", &c.training.reduce_dtype);
  f("training.on_nonfinite", &c.training.on_nonfinite);
  f("training.device", &c.training.device);
  f("training.detect_anomaly", &c.training.detect_anomaly);
  f("optimizer.type", &c.optimizer.type);
  f("optimizer.lr", &c.optimizer.lr);
  f("optimizer.weight_decay", &c.optimizer.weight_decay);
  f("optimizer.beta1", &c.optimizer.beta1);
  f("optimizer.beta2", &c.optimizer.beta2);
  f("optimizer.eps", &c.optimizer.eps);
  f("optimizer.momentum", &c.optimizer.momentum);
  f("optimizer.nesterov", &c.optimizer.nesterov);
  f("optimizer.grad_clip", &c.optimizer.grad_clip);
  f("schedule.type", &c.schedule.type);
  f("schedule.warmup_steps", &c.schedule.warmup_steps);
  f("schedule.warmup_type", &c.schedule.warmup_type);
  f("schedule.min_lr_ratio", &c.schedule.min_lr_ratio);
  f("schedule.decay_steps", &c.schedule.decay_steps);
  f("schedule.scale_lr", &c.schedule.scale_lr);
  f("schedule.base_batch_size", &c.schedule.base_batch_size);
  f("parallel.strategy", &c.parallel.strategy);
  f("parallel.sharding_strategy", &c.parallel.sharding_strategy);
  f("parallel.sharding_factor", &c.parallel.sharding_factor);
  f("parallel.tensor_parallel_size", &c.parallel.tensor_parallel_size);
  f("parallel.sequence_parallel", &c.parallel.sequence_parallel);
  f("parallel.context_parallel_size", &c.parallel.context_parallel_size);
  f("parallel.context_parallel_mode", &c.parallel.context_parallel_mode);
  f("parallel.pipeline_parallel_size", &c.parallel.pipeline_parallel_size);
  f("parallel.pipeline_schedule", &c.parallel.pipeline_schedule);
  f("parallel.pipeline_virtual_stages", &c.parallel.pipeline_virtual_stages);
  f("parallel.pipeline_balance", &c.parallel.pipeline_balance);
  f("parallel.pipeline_trace", &c.parallel.pipeline_trace);
  f("parallel.sync_each_batch", &c.parallel.sync_each_batch);
  f("parallel.forward_prefetch", &c.parallel.forward_prefetch);
  f("parallel.backward_prefetch", &c.parallel.backward_prefetch);
  f("parallel.limit_all_gathers", &c.parallel.limit_all_gathers);
  f("parallel.param_persistence_threshold", &c.parallel.param_persistence_threshold);
  f("parallel.unsharded_units", &c.parallel.unsharded_units);
  f("parallel.keep_gathered_units", &c.parallel.keep_gathered_units);
  f("parallel.offload_optimizer", &c.parallel.offload_optimizer);
  f("parallel.offload_params", &c.parallel.offload_params);
  f("parallel.offload_dir", &c.parallel.offload_dir);
  f("parallel.bucket_mb", &c.parallel.bucket_mb);
  f("parallel.find_unused_parameters", &c.parallel.find_unused_parameters);
  f("parallel.comm_timeout_s", &c.parallel.comm_timeout_s);
  f("parallel.comm_debug", &c.parallel.comm_debug);
  f("parallel.comm_backend", &c.parallel.comm_backend);
  f("memory.budget", &c.memory.budget);
  f("fp16.loss_scale", &c.fp16.loss_scale);
  f("fp16.initial_scale_power", &c.fp16.initial_scale_power);
  f("fp16.loss_scale_window", &c.fp16.loss_scale_window);
  f("fp16.hysteresis", &c.fp16.hysteresis);
  f("fp16.consecutive_hysteresis", &c.fp16.consecutive_hysteresis);
  f("fp16.min_loss_scale", &c.fp16.min_loss_scale);
  f("checkpoint.dir", &c.checkpoint.dir);
  f("checkpoint.interval", &c.checkpoint.interval);
  f("checkpoint.keep_last", &c.checkpoint.keep_last);
  f("checkpoint.async", &c.checkpoint.async);
  f("output.dir", &c.output.dir);
  f("output.export_model", &c.output.export_model);
  f("output.samples", &c.output.samples);
  f("output.sample_tokens", &c.output.sample_tokens);
  f("output.sample_prompt", &c.output.sample_prompt);
  f("output.profile", &c.output.profile);
}

std::map<std::string, FieldPtr> field_map(TrainConfig& c) {
  std::map<std::string, FieldPtr> m;
  visit_fields(c, [&](const char* k, FieldPtr p) { m.emplace(k, p); });
  return m;
}

const char* type_name(const FieldPtr& p) {
  struct V {
    const char* operator()(std::string*) { return "a string"; }
    const char* operator()(int64_t*) { return "an integer"; }
    const char* operator()(uint64_t*) { return "a non-negative integer"; }
    const char* operator()(double*) { return "a number"; }
    const char* operator()(bool*) { return "true or false"; }
  };
  return std::visit(V{}, p);
}

void set_scalar(const FieldPtr& p, const YAML::Node& n, const std::string& key,
                const std::string& where) {
  if (!n.IsScalar())
    BRAID_THROW(where, ": key '", key, "' must be ", type_name(p), ", got a ",
                n.IsMap()        ? "mapping"
                : n.IsSequence() ? "list"
                                 : "null");
  try {
    std::visit([&](auto* ptr) { *ptr = n.as<std::remove_pointer_t<decltype(ptr)>>(); }, p);
  } catch (const YAML::Exception&) {
    BRAID_THROW(where, ": key '", key, "' must be ", type_name(p), ", got '", n.Scalar(), "'");
  }
}

// " (did you mean 'training.max_steps'?)" (closest_key.h) among the config's keys.
std::string did_you_mean(const std::string& key, const std::map<std::string, FieldPtr>& fields) {
  std::vector<std::string> known;
  for (const auto& [k, _] : fields) known.push_back(k);
  return config::did_you_mean(key, known);
}

void parse_node(const YAML::Node& node, const std::string& prefix,
                std::map<std::string, FieldPtr>& fields, const std::string& source,
                Provenance* origins) {
  std::set<std::string> sections;
  for (auto& [k, _] : fields) sections.insert(k.substr(0, k.find('.')));
  for (auto it = node.begin(); it != node.end(); ++it) {
    std::string key =
        prefix.empty() ? it->first.as<std::string>() : prefix + "." + it->first.as<std::string>();
    std::string where = source + ":" + std::to_string(it->first.Mark().line + 1);
    auto f = fields.find(key);
    if (f != fields.end()) {
      set_scalar(f->second, it->second, key, where);
      if (origins) origins->set(key, where);
      continue;
    }
    if (prefix.empty() && sections.count(key)) {
      BRAID_CHECK(it->second.IsMap(), where, ": section '", key, "' must be a mapping");
      parse_node(it->second, key, fields, source, origins);
      continue;
    }
    BRAID_THROW(where, ": unknown key '", key, "'", did_you_mean(key, fields));
  }
}

}  // namespace

namespace {

YAML::Node load_yaml(const std::string& text, const std::string& source) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    BRAID_THROW(source, ":", e.mark.line + 1, ": invalid YAML: ", e.msg);
  }
  reject_duplicate_keys(root, source);
  return root;
}

TrainConfig parse_root(const YAML::Node& root, const std::string& source, Provenance* origins) {
  TrainConfig cfg;
  if (root.IsNull()) return cfg;
  BRAID_CHECK(root.IsMap(), source, ": the config must be a mapping of sections");
  auto fields = field_map(cfg);
  parse_node(root, "", fields, source, origins);
  return cfg;
}

}  // namespace

TrainConfig parse_config(const std::string& text, const std::string& source, Provenance* origins) {
  return parse_root(load_yaml(text, source), source, origins);
}

TrainConfig load_config(const std::string& path, Provenance* origins) {
  std::error_code ec;
  BRAID_CHECK(!std::filesystem::is_directory(path, ec), "config file '", path,
              "' is a directory, not a YAML file");
  std::ifstream in(path);
  BRAID_CHECK(in.good(), "cannot open config file '", path, "'");
  std::stringstream ss;
  ss << in.rdbuf();
  BRAID_CHECK(!in.bad(), "cannot read config file '", path, "'");
  const YAML::Node root = load_yaml(ss.str(), path);
  // Defaults alone never train (no model, no data): an empty file is a wrong path or a lost
  // write, and saying so beats "set one of model.preset ...".
  BRAID_CHECK(!root.IsNull(), "config file '", path, "' is empty (no keys)");
  return parse_root(root, path, origins);
}

void apply_override(TrainConfig& cfg, const std::string& assignment, Provenance* origins) {
  auto eq = assignment.find('=');
  BRAID_CHECK(eq != std::string::npos && eq > 0, "--set expects key=value, got '", assignment, "'");
  std::string key = assignment.substr(0, eq);
  auto fields = field_map(cfg);
  auto f = fields.find(key);
  BRAID_CHECK(f != fields.end(), "--set: unknown key '", key, "'", did_you_mean(key, fields));
  YAML::Node value;
  try {
    value = YAML::Load(assignment.substr(eq + 1));
  } catch (const YAML::Exception& e) {
    BRAID_THROW("--set ", key, ": invalid value: ", e.msg);
  }
  if (value.IsNull() && std::holds_alternative<std::string*>(f->second))
    *std::get<std::string*>(f->second) = "";
  else
    set_scalar(f->second, value, key, "--set");
  if (origins) origins->set(key, "--set");
}

void resolve_batch(TrainConfig& cfg, int64_t dp) {
  auto& t = cfg.training;
  BRAID_CHECK(dp >= 1, "data-parallel size must be >= 1, got ", dp);
  for (auto [name, v] : {std::pair{"micro_batch_size", t.micro_batch_size},
                         {"gradient_accumulation_steps", t.gradient_accumulation_steps},
                         {"global_batch_size", t.global_batch_size}})
    BRAID_CHECK(v >= 0, "training.", name, " must be positive, got ", v);
  int known =
      (t.micro_batch_size > 0) + (t.gradient_accumulation_steps > 0) + (t.global_batch_size > 0);
  if (known < 2 && t.gradient_accumulation_steps == 0) {
    t.gradient_accumulation_steps = 1;
    ++known;
  }
  BRAID_CHECK(known >= 2,
              "training: state at least two of micro_batch_size, gradient_accumulation_steps, "
              "global_batch_size (global = micro x accumulation x data-parallel size)");
  if (t.micro_batch_size == 0) {
    int64_t denom = t.gradient_accumulation_steps * dp;
    BRAID_CHECK(t.global_batch_size % denom == 0, "training.global_batch_size ",
                t.global_batch_size, " is not divisible by gradient_accumulation_steps ",
                t.gradient_accumulation_steps, " x data-parallel size ", dp, " = ", denom);
    t.micro_batch_size = t.global_batch_size / denom;
  } else if (t.gradient_accumulation_steps == 0) {
    int64_t denom = t.micro_batch_size * dp;
    BRAID_CHECK(t.global_batch_size % denom == 0, "training.global_batch_size ",
                t.global_batch_size, " is not divisible by micro_batch_size ", t.micro_batch_size,
                " x data-parallel size ", dp, " = ", denom);
    t.gradient_accumulation_steps = t.global_batch_size / denom;
  } else if (t.global_batch_size == 0) {
    t.global_batch_size = t.micro_batch_size * t.gradient_accumulation_steps * dp;
  }
  int64_t product = t.micro_batch_size * t.gradient_accumulation_steps * dp;
  BRAID_CHECK(product == t.global_batch_size, "training: global_batch_size ", t.global_batch_size,
              " != micro_batch_size ", t.micro_batch_size, " x gradient_accumulation_steps ",
              t.gradient_accumulation_steps, " x data-parallel size ", dp, " = ", product);
}

void validate_training(const TrainConfig& c) {
  auto one_of = [](const std::string& key, const std::string& v,
                   std::initializer_list<const char*> options) {
    std::string list;
    for (const char* o : options) {
      if (v == o) return;
      list += list.empty() ? o : std::string(", ") + o;
    }
    BRAID_THROW("config key '", key, "' is '", v, "', expected one of: ", list);
  };
  one_of("optimizer.type", c.optimizer.type, {"adamw", "sgd"});
  one_of("schedule.type", c.schedule.type, {"constant", "linear", "cosine"});
  one_of("schedule.warmup_type", c.schedule.warmup_type, {"linear", "log"});
  one_of("parallel.strategy", c.parallel.strategy,
         {"none", "ddp", "zero1", "zero2", "zero3", "fsdp", "auto"});
  one_of("parallel.sharding_strategy", c.parallel.sharding_strategy,
         {"FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD", "HYBRID_SHARD_ZERO2"});
  one_of("parallel.sync_each_batch", c.parallel.sync_each_batch, {"auto", "true", "false"});
  one_of("parallel.comm_backend", c.parallel.comm_backend, {"auto", "nccl", "host"});
  BRAID_CHECK(
      c.parallel.comm_backend != "nccl" || c.training.device != "cpu",
      "parallel.comm_backend: nccl needs training.device cuda (the ranks' tensors on GPUs), "
      "got training.device cpu");
  one_of("training.precision", c.training.precision, {"fp32", "bf16", "fp16"});
  checkpoint_policy(c);  // throws naming a bad model.activation_checkpointing
  one_of("training.reduce_dtype", c.training.reduce_dtype, {"fp32", "bf16", "fp16"});
  one_of("training.on_nonfinite", c.training.on_nonfinite, {"stop", "skip", "off"});
  {
    const std::string& d = c.training.device;
    const bool indexed = d.rfind("cuda:", 0) == 0 && d.size() > 5 &&
                         d.find_first_not_of("0123456789", 5) == std::string::npos;
    BRAID_CHECK(d == "cpu" || d == "cuda" || indexed, "training.device: '", d,
                "' is not cpu, cuda or cuda:N");
  }
  optim::LossScaler check_fp16(loss_scaler_config(c));  // throws naming the bad fp16 key
  BRAID_CHECK(c.training.max_steps > 0, "training.max_steps must be positive, got ",
              c.training.max_steps);
  BRAID_CHECK(c.optimizer.lr > 0, "optimizer.lr must be positive, got ", c.optimizer.lr);
  BRAID_CHECK(c.optimizer.grad_clip >= 0, "optimizer.grad_clip must be >= 0, got ",
              c.optimizer.grad_clip);
  // A constant schedule may warm up past the run's end (DeepSpeed's WarmupLR defaults to 1000).
  const int64_t decay_steps =
      c.schedule.decay_steps > 0 ? c.schedule.decay_steps : c.training.max_steps;
  BRAID_CHECK(c.schedule.decay_steps >= 0, "schedule.decay_steps must be >= 0, got ",
              c.schedule.decay_steps);
  BRAID_CHECK(c.schedule.warmup_steps >= 0 &&
                  (c.schedule.type == "constant" || c.schedule.warmup_steps <= decay_steps),
              "schedule.warmup_steps ", c.schedule.warmup_steps, " must be within [0, ",
              c.schedule.decay_steps > 0 ? "schedule.decay_steps" : "training.max_steps", " = ",
              decay_steps, "]");
  BRAID_CHECK(c.schedule.min_lr_ratio >= 0 && c.schedule.min_lr_ratio <= 1,
              "schedule.min_lr_ratio must be within [0, 1], got ", c.schedule.min_lr_ratio);
  BRAID_CHECK(!c.schedule.scale_lr || c.schedule.base_batch_size > 0,
              "schedule.scale_lr needs schedule.base_batch_size > 0");
  BRAID_CHECK(c.parallel.bucket_mb > 0, "parallel.bucket_mb must be positive, got ",
              c.parallel.bucket_mb);
  BRAID_CHECK(c.parallel.comm_timeout_s > 0, "parallel.comm_timeout_s must be positive");
  BRAID_CHECK(c.parallel.tensor_parallel_size >= 1,
              "parallel.tensor_parallel_size must be >= 1, got ", c.parallel.tensor_parallel_size);
  BRAID_CHECK(!c.parallel.sequence_parallel || c.parallel.tensor_parallel_size > 1,
              "parallel.sequence_parallel is true but parallel.tensor_parallel_size is 1 "
              "(sequence parallelism splits what tensor parallelism replicates)");
  BRAID_CHECK(c.parallel.context_parallel_size >= 1,
              "parallel.context_parallel_size must be >= 1, got ",
              c.parallel.context_parallel_size);
  BRAID_CHECK(
      c.parallel.context_parallel_mode == "ring" || c.parallel.context_parallel_mode == "ulysses",
      "config key 'parallel.context_parallel_mode' is '", c.parallel.context_parallel_mode,
      "', expected one of: ring, ulysses");
  BRAID_CHECK(c.parallel.pipeline_parallel_size >= 1,
              "parallel.pipeline_parallel_size must be >= 1, got ",
              c.parallel.pipeline_parallel_size);
  BRAID_CHECK(c.parallel.pipeline_virtual_stages >= 1,
              "parallel.pipeline_virtual_stages must be >= 1, got ",
              c.parallel.pipeline_virtual_stages);
  BRAID_CHECK(c.parallel.sharding_factor >= 0, "parallel.sharding_factor must be >= 0, got ",
              c.parallel.sharding_factor);
  BRAID_CHECK(c.parallel.limit_all_gathers >= 1, "parallel.limit_all_gathers must be >= 1, got ",
              c.parallel.limit_all_gathers);
  BRAID_CHECK(c.parallel.param_persistence_threshold >= 0,
              "parallel.param_persistence_threshold must be >= 0, got ",
              c.parallel.param_persistence_threshold);
  BRAID_CHECK(c.checkpoint.interval >= 0,
              "checkpoint.interval must be >= 0 (0: no checkpoints), got ", c.checkpoint.interval);
  BRAID_CHECK(c.checkpoint.keep_last >= 0, "checkpoint.keep_last must be >= 0 (0: keep all), got ",
              c.checkpoint.keep_last);
  BRAID_CHECK(!c.training.resume.empty(),
              "training.resume must be auto, never or a checkpoint directory");
  if (!c.memory.budget.empty()) {
    try {
      (void)parse_bytes(c.memory.budget);
    } catch (const Error& e) {
      BRAID_THROW("config key 'memory.budget': ", e.what());
    }
  }
}

int64_t data_parallel_size(const TrainConfig& cfg, int64_t ranks) {
  const int64_t model_parallel = cfg.parallel.tensor_parallel_size *
                                 cfg.parallel.pipeline_parallel_size *
                                 cfg.parallel.context_parallel_size;
  return std::max<int64_t>(1, ranks) / std::max<int64_t>(1, model_parallel);
}

void validate(const TrainConfig& c) {
  BRAID_CHECK(!c.model.preset.empty() || !c.model.config.empty() || !c.model.init_from.empty(),
              "config: set one of model.preset, model.config or model.init_from");
  BRAID_CHECK(c.data.random_tokens || !c.data.train.empty(),
              "config: set data.train (a prepared token directory) or data.random_tokens");
  BRAID_CHECK(c.data.seq_len > 0, "data.seq_len must be positive, got ", c.data.seq_len);
  validate_training(c);
}

std::string TrainConfig::checkpoint_dir() const {
  return checkpoint.dir.empty() ? (std::filesystem::path(output.dir) / "checkpoints").string()
                                : checkpoint.dir;
}

nn::CheckpointPolicy checkpoint_policy(const TrainConfig& c) {
  BRAID_CHECK(c.model.activation_checkpointing_interval >= 1,
              "model.activation_checkpointing_interval must be >= 1, got ",
              c.model.activation_checkpointing_interval);
  try {
    return nn::CheckpointPolicy::parse(c.model.activation_checkpointing,
                                       c.model.activation_checkpointing_interval);
  } catch (const Error& e) {
    BRAID_THROW("model.activation_checkpointing: ", e.what());
  }
}

optim::LossScalerConfig loss_scaler_config(const TrainConfig& c) {
  optim::LossScalerConfig s;
  s.loss_scale = c.fp16.loss_scale;
  // Out-of-range values stay out of range, so the scaler's check names them.
  auto narrow = [](int64_t v) {
    return static_cast<int>(std::clamp<int64_t>(v, INT_MIN, INT_MAX));
  };
  s.initial_scale_power = narrow(c.fp16.initial_scale_power);
  s.loss_scale_window = c.fp16.loss_scale_window;
  s.hysteresis = narrow(c.fp16.hysteresis);
  s.consecutive_hysteresis = c.fp16.consecutive_hysteresis;
  s.min_loss_scale = c.fp16.min_loss_scale;
  return s;
}

namespace {
DType float_dtype(const std::string& key, const std::string& value) {
  if (value == "bf16") return DType::bf16;
  if (value == "fp16") return DType::f16;
  BRAID_CHECK(value == "fp32", key, ": unknown value '", value, "' (expected fp32, bf16 or fp16)");
  return DType::f32;
}
}  // namespace

DType TrainConfig::compute_dtype() const {
  return float_dtype("training.precision", training.precision);
}

DType TrainConfig::reduce_dtype() const {
  return float_dtype("training.reduce_dtype", training.reduce_dtype);
}

std::vector<std::pair<std::string, std::string>> config_entries(const TrainConfig& cfg) {
  TrainConfig copy = cfg;
  std::vector<std::pair<std::string, std::string>> out;
  visit_fields(copy, [&](const char* key, FieldPtr p) {
    std::string value = std::visit(
        [](auto* v) -> std::string {
          using T = std::remove_pointer_t<decltype(v)>;
          if constexpr (std::is_same_v<T, std::string>) {
            YAML::Emitter e;
            e << YAML::DoubleQuoted << *v;
            return e.c_str();
          } else if constexpr (std::is_same_v<T, bool>) {
            return *v ? "true" : "false";
          } else {
            // Shortest text that reads back to the same value (0.1 stays "0.1").
            char buf[32];
            auto r = std::to_chars(buf, buf + sizeof(buf), *v);
            return std::string(buf, r.ptr);
          }
        },
        p);
    out.emplace_back(key, std::move(value));
  });
  return out;
}

std::string dump_config(const TrainConfig& cfg, const Provenance* origins) {
  const auto entries = config_entries(cfg);
  // Origins line up after the values, but a long value (a prompt, a path) does not push the
  // column for all the others.
  size_t column = 0;
  for (const auto& [key, value] : entries) {
    const size_t width = 2 + (key.size() - key.find('.') - 1) + 2 + value.size();
    if (width <= 44) column = std::max(column, width);
  }
  std::ostringstream os;
  std::string section;
  for (const auto& [key, value] : entries) {
    std::string s = key.substr(0, key.find('.'));
    if (s != section) {
      os << s << ":\n";
      section = s;
    }
    std::string line = "  " + key.substr(key.find('.') + 1) + ": " + value;
    if (origins)
      line += std::string(line.size() < column ? column - line.size() : 0, ' ') + "  # " +
              origins->of(key);
    os << line << "\n";
  }
  return os.str();
}

}  // namespace braid::config
