// The "optimizer" and "scheduler" blocks of a DeepSpeed config (deepspeed_sections.h).
#include <cmath>
#include <string>

#include "braid/config/closest_key.h"
#include "braid/config/deepspeed_sections.h"

namespace braid::config::dialect {

void read_deepspeed_optimizer(DialectReader& r, TrainConfig& cfg) {
  if (!r.section("optimizer")) return;
  const json* type = r.find("optimizer.type");
  if (!type) r.fail("optimizer.type", "missing (AdamW, Adam or SGD)");
  static const std::vector<std::string> kKnownOther = {
      "Lamb", "OneBitAdam", "ZeroOneAdam", "OneBitLamb", "Adagrad", "Lion", "MuAdam", "MuAdamW"};
  if (type->is_string())
    for (const auto& k : kKnownOther)
      if (edit_distance(k, type->get<std::string>()) == 0)
        r.unsupported("optimizer.type", "'" + k + "'; braid has AdamW (Adam) and SGD");
  const std::string t = *r.choice("optimizer.type", {"AdamW", "Adam", "SGD"});
  cfg.optimizer.type = t == "SGD" ? "sgd" : "adamw";
  r.note("optimizer.type", "optimizer.type = " + cfg.optimizer.type);
  r.section("optimizer.params");
  const std::string p = "optimizer.params.";
  auto set = [&](const std::string& key, double& field, double lo, double hi) {
    if (auto v = r.number(p + key, lo, hi)) {
      field = *v;
      r.note(p + key, "optimizer." + key + " = " + format_number(*v));
    }
  };
  // A key missing from the optimizer block takes DeepSpeed's default (FusedAdam's, torch's SGD's:
  // lr 1e-3, betas 0.9, 0.999, eps 1e-8, weight decay 0, no momentum), not the YAML's.
  auto absent = [&](const std::string& key, double& field, double value) {
    if (r.find(p + key)) return;
    field = value;
    r.defaulted(p + key, "optimizer." + key + " = " + format_number(value));
  };
  set("lr", cfg.optimizer.lr, 1e-30, 1e30);
  absent("lr", cfg.optimizer.lr, 1e-3);
  set("weight_decay", cfg.optimizer.weight_decay, 0, 1e30);
  // torch_adam: DeepSpeed builds torch.optim.AdamW, whose default decay is 0.01.
  const bool torch_adam = cfg.optimizer.type == "adamw" && r.find(p + "torch_adam") &&
                          r.find(p + "torch_adam")->is_boolean() &&
                          r.find(p + "torch_adam")->get<bool>();
  absent("weight_decay", cfg.optimizer.weight_decay, torch_adam ? 0.01 : 0);
  if (cfg.optimizer.type == "adamw") {
    set("eps", cfg.optimizer.eps, 1e-30, 1);
    absent("eps", cfg.optimizer.eps, 1e-8);
    if (!r.find(p + "betas")) {
      cfg.optimizer.beta1 = 0.9;
      cfg.optimizer.beta2 = 0.999;
      r.defaulted(p + "betas", "optimizer.beta1 = 0.9, optimizer.beta2 = 0.999");
    }
    if (r.is_auto(r.find(p + "betas"))) r.keep_yaml(p + "betas");
    if (const json* b = r.find(p + "betas"); b && !r.is_auto(b)) {
      if (!b->is_array() || b->size() != 2 || !(*b)[0].is_number() || !(*b)[1].is_number())
        r.fail(p + "betas", "must be [beta1, beta2], got " + show(*b));
      for (int i = 0; i < 2; ++i) {
        const double x = (*b)[static_cast<size_t>(i)].get<double>();
        if (!(x >= 0 && x < 1)) r.fail(p + "betas", "each must be in [0, 1), got " + show(*b));
      }
      cfg.optimizer.beta1 = (*b)[0].get<double>();
      cfg.optimizer.beta2 = (*b)[1].get<double>();
      r.note(p + "betas", "optimizer.beta1 = " + format_number(cfg.optimizer.beta1) +
                              ", optimizer.beta2 = " + format_number(cfg.optimizer.beta2));
    }
    // DeepSpeed's Adam is AdamW unless adam_w_mode is false (L2 in the gradient).
    if (!r.boolean(p + "adam_w_mode").value_or(true) && cfg.optimizer.weight_decay != 0)
      r.unsupported(p + "adam_w_mode",
                    "Adam with L2 weight decay; braid's Adam decays "
                    "decoupled (AdamW), or set weight_decay 0");
    if (!r.boolean(p + "bias_correction").value_or(true))
      r.unsupported(p + "bias_correction", "braid's AdamW always corrects the bias");
    if (r.boolean(p + "amsgrad").value_or(false)) r.unsupported(p + "amsgrad", "no AMSGrad");
    r.ignore(p + "torch_adam", "one AdamW kernel");
    r.ignore(p + "adam_w_mode", "AdamW");
  } else {
    set("momentum", cfg.optimizer.momentum, 0, 1);
    absent("momentum", cfg.optimizer.momentum, 0);
    if (!r.find(p + "nesterov")) {
      cfg.optimizer.nesterov = false;
      r.defaulted(p + "nesterov", "optimizer.nesterov = false");
    }
    if (auto v = r.boolean(p + "nesterov")) {
      cfg.optimizer.nesterov = *v;
      r.note(p + "nesterov", std::string("optimizer.nesterov = ") + (*v ? "true" : "false"));
    }
    if (r.number(p + "dampening", 0, 1).value_or(0) != 0)
      r.unsupported(p + "dampening", "SGD without dampening only");
  }
}

void read_deepspeed_scheduler(DialectReader& r, TrainConfig& cfg) {
  if (!r.section("scheduler")) return;
  if (const json* t = r.find("scheduler.type");
      t && t->is_string() &&
      (t->get<std::string>() == "OneCycle" || t->get<std::string>() == "LRRangeTest"))
    r.unsupported("scheduler.type", "'" + t->get<std::string>() +
                                        "'; braid has WarmupLR, WarmupDecayLR, WarmupCosineLR");
  if (!r.find("scheduler.type")) r.fail("scheduler.type", "missing");
  const std::string t =
      *r.choice("scheduler.type", {"WarmupLR", "WarmupDecayLR", "WarmupCosineLR"});
  r.section("scheduler.params");
  const std::string p = "scheduler.params.";
  ScheduleSection& s = cfg.schedule;
  s.type = t == "WarmupLR" ? "constant" : t == "WarmupDecayLR" ? "linear" : "cosine";
  // The floor and the decay's length are the scheduler's: WarmupLR has neither, WarmupDecayLR
  // decays to 0; below, total_num_steps gives the length and cos_min_ratio the cosine's floor
  // ("auto": the YAML's).
  const double yaml_min_lr_ratio = s.min_lr_ratio;
  s.min_lr_ratio = 0;
  s.decay_steps = 0;
  r.note("scheduler.type",
         "schedule.type = " + s.type +
             (t == "WarmupLR"        ? ", schedule.min_lr_ratio = 0, schedule.decay_steps = 0 (a "
                                       "constant rate has no decay)"
              : t == "WarmupDecayLR" ? ", schedule.min_lr_ratio = 0 (it decays to 0)"
                                     : ""));
  // A key missing from params takes DeepSpeed's default (lr_schedules.py): 1000 warmup steps,
  // log warmup, warmup_max_lr 1e-3, cos_min_ratio 1e-4; "auto" keeps the YAML's.
  if (auto v = r.integer(p + "warmup_num_steps", 0, INT64_MAX)) {
    s.warmup_steps = *v;
    r.note(p + "warmup_num_steps", "schedule.warmup_steps = " + std::to_string(*v));
  } else if (!r.find(p + "warmup_num_steps")) {
    s.warmup_steps = 1000;
    r.defaulted(p + "warmup_num_steps", "schedule.warmup_steps = 1000");
  }
  if (auto v = r.choice(p + "warmup_type", {"log", "linear"})) {
    s.warmup_type = *v;
    r.note(p + "warmup_type", "schedule.warmup_type = " + *v);
  } else {
    s.warmup_type = "log";
    r.defaulted(p + "warmup_type", "schedule.warmup_type = log");
  }
  if (t == "WarmupCosineLR") {
    if (r.number(p + "warmup_min_ratio", 0, 1).value_or(0) != 0)
      r.unsupported(p + "warmup_min_ratio", "warmup starts from 0 in braid");
    if (auto v = r.number(p + "cos_min_ratio", 0, 1)) {
      s.min_lr_ratio = *v;
      r.note(p + "cos_min_ratio", "schedule.min_lr_ratio = " + format_number(*v));
    } else if (r.is_auto(r.find(p + "cos_min_ratio"))) {
      s.min_lr_ratio = yaml_min_lr_ratio;
    } else if (!r.find(p + "cos_min_ratio")) {
      s.min_lr_ratio = 0.0001;
      r.defaulted(p + "cos_min_ratio", "schedule.min_lr_ratio = 0.0001");
    }
  } else {
    if (r.number(p + "warmup_min_lr", 0, 1e30).value_or(0) != 0)
      r.unsupported(p + "warmup_min_lr", "warmup starts from 0 in braid");
    // DeepSpeed's WarmupLR and WarmupDecayLR set the peak rate themselves.
    if (auto v = r.number(p + "warmup_max_lr", 1e-30, 1e30)) {
      cfg.optimizer.lr = *v;
      r.note(p + "warmup_max_lr", "optimizer.lr = " + format_number(*v));
    } else if (!r.find(p + "warmup_max_lr")) {
      cfg.optimizer.lr = 0.001;
      r.defaulted(p + "warmup_max_lr", "optimizer.lr = 0.001");
    }
  }
  if (t != "WarmupLR") {
    // The decay may end before or after the run; past it the rate stays at its floor. "auto"
    // is the run's length (HF Trainer fills it with max_steps), whatever the YAML's decay_steps.
    if (r.is_auto(r.find(p + "total_num_steps"))) {
      r.note(p + "total_num_steps", "schedule.decay_steps = 0 (\"auto\": training.max_steps)");
    } else if (auto v = r.integer(p + "total_num_steps", 1, INT64_MAX)) {
      if (s.warmup_steps > *v)
        r.fail(p + "warmup_num_steps",
               std::to_string(s.warmup_steps) +
                   (r.find(p + "warmup_num_steps") ? "" : " (DeepSpeed's default)") +
                   " > total_num_steps " + std::to_string(*v));
      s.decay_steps = *v;
      r.note(p + "total_num_steps", "schedule.decay_steps = " + std::to_string(*v));
    } else if (!r.find(p + "total_num_steps")) {
      r.fail(p + "total_num_steps", "missing (" + t + " needs it; \"auto\": training.max_steps)");
    }
  }
  r.ignore(p + "last_batch_iteration", "the step comes from the checkpoint");
}

}  // namespace braid::config::dialect
