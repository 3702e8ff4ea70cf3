#include "braid/config/accelerate_questions.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <istream>
#include <map>
#include <ostream>
#include <sstream>
#include <vector>

#include "braid/core/error.h"

namespace braid::config {

namespace {

std::string trim(std::string s) {
  const auto blank = [](unsigned char c) { return std::isspace(c) != 0; };
  s.erase(s.begin(), std::find_if_not(s.begin(), s.end(), blank));
  s.erase(std::find_if_not(s.rbegin(), s.rend(), blank).base(), s.end());
  return s;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

class Prompt {
 public:
  Prompt(std::istream& in, std::ostream& out) : in_(in), out_(out) {}

  // One answer; an empty line is `fallback`. accept() returns "" for a good answer, else what
  // to say before asking again.
  template <typename Accept>
  std::string ask(const std::string& question, const std::string& fallback, Accept accept) {
    for (;;) {
      out_ << question << " [" << fallback << "]: " << std::flush;
      std::string line;
      BRAID_CHECK(std::getline(in_, line), "braid config: the input ended before an answer to '",
                  question, "'");
      std::string answer = trim(line);
      if (answer.empty()) answer = fallback;
      const std::string why = accept(answer);
      if (why.empty()) return answer;
      out_ << why << "\n";
    }
  }
  bool yes_no(const std::string& question, bool fallback) {
    const std::string a =
        ask(question + " (yes/no)", fallback ? "yes" : "no", [](const std::string& s) {
          const std::string l = lower(s);
          return l == "yes" || l == "y" || l == "no" || l == "n" ? "" : "Please enter yes or no.";
        });
    return lower(a)[0] == 'y';
  }
  int64_t number(const std::string& question, int64_t fallback, int64_t lo, int64_t hi) {
    const std::string a =
        ask(question, std::to_string(fallback), [&](const std::string& s) -> std::string {
          char* end = nullptr;
          const long long v = std::strtoll(s.c_str(), &end, 10);
          if (end == s.c_str() || *end != '\0' || v < lo || v > hi)
            return "Please enter a whole number from " + std::to_string(lo) + " to " +
                   std::to_string(hi) + ".";
          return "";
        });
    return std::stoll(a);
  }
  double decimal(const std::string& question, double fallback) {
    std::ostringstream f;
    f << fallback;
    const std::string a = ask(question, f.str(), [](const std::string& s) -> std::string {
      char* end = nullptr;
      const double v = std::strtod(s.c_str(), &end);
      return end != s.c_str() && *end == '\0' && v >= 0 ? "" : "Please enter a number >= 0.";
    });
    return std::stod(a);
  }
  // One of `choices` by number (1-based) or by name.
  std::string choose(const std::string& question, const std::vector<std::string>& choices,
                     size_t fallback) {
    out_ << question << "\n";
    for (size_t i = 0; i < choices.size(); ++i) out_ << "  " << i + 1 << ") " << choices[i] << "\n";
    std::string picked;
    ask("Your choice", std::to_string(fallback + 1), [&](const std::string& s) -> std::string {
      for (size_t i = 0; i < choices.size(); ++i)
        if (s == std::to_string(i + 1) || lower(s) == lower(choices[i])) {
          picked = choices[i];
          return "";
        }
      return "Please enter a number from 1 to " + std::to_string(choices.size()) + " or a name.";
    });
    return picked;
  }

 private:
  std::istream& in_;
  std::ostream& out_;
};

}  // namespace

std::string ask_accelerate_config(std::istream& in, std::ostream& out) {
  Prompt p(in, out);
  std::map<std::string, std::string> top;  // Accelerate writes its keys sorted
  std::map<std::string, std::string> block;
  std::string block_name;
  top["compute_environment"] = "LOCAL_MACHINE";
  p.choose("In which compute environment are you running?", {"This machine"}, 0);
  const std::string machine =
      p.choose("Which type of machine are you using?", {"No distributed training", "multi-CPU"}, 1);
  std::string type = machine == "multi-CPU" ? "MULTI_CPU" : "NO";
  int64_t machines = 1, processes = 1;
  if (type != "NO") {
    machines = p.number(
        "How many different machines will you use (more than 1 for multi-node "
        "training; braid launch takes their hosts from --hostfile)?",
        1, 1, 100000);
    processes = p.number("How many processes in total will you use?", 2, 1, 1000000);
    if (p.yes_no("Do you want to use DeepSpeed?", false)) {
      type = "DEEPSPEED";
      block_name = "deepspeed_config";
      const int64_t stage =
          p.number("What should be your DeepSpeed's ZeRO optimization stage? (0-3)", 2, 0, 3);
      block["zero_stage"] = std::to_string(stage);
      if (stage >= 1)
        block["offload_optimizer_device"] =
            p.choose("Where to offload optimizer states?", {"none", "cpu", "nvme"}, 0);
      if (stage == 3)
        block["offload_param_device"] =
            p.choose("Where to offload parameters?", {"none", "cpu", "nvme"}, 0);
      for (const char* what : {"optimizer", "param"}) {
        const std::string key = std::string("offload_") + what + "_device";
        if (block.count(key) && block[key] == "nvme")
          block[std::string("offload_") + what + "_nvme_path"] =
              p.ask(std::string("Nvme path to offload ") + what + "s to?", "/nvme",
                    [](const std::string&) { return std::string(); });
      }
      block["gradient_accumulation_steps"] = std::to_string(
          p.number("How many gradient accumulation steps are you using?", 1, 1, 1000000));
      if (p.yes_no("Do you want to use gradient clipping?", false)) {
        std::ostringstream v;
        v << p.decimal("What is the gradient clipping value?", 1.0);
        block["gradient_clipping"] = v.str();
      }
      if (stage == 3)
        block["zero3_save_16bit_model"] =
            p.yes_no("Do you want to save 16-bit model weights when using ZeRO Stage-3?", false)
                ? "true"
                : "false";
    } else if (p.yes_no("Do you want to use FullyShardedDataParallel?", false)) {
      type = "FSDP";
      block_name = "fsdp_config";
      block["fsdp_sharding_strategy"] = p.choose(
          "What should be your sharding strategy?",
          {"FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD", "HYBRID_SHARD_ZERO2"}, 0);
      block["fsdp_backward_prefetch"] =
          p.choose("What should be your FSDP's backward prefetch policy?",
                   {"BACKWARD_PRE", "BACKWARD_POST", "NO_PREFETCH"}, 0);
      block["fsdp_forward_prefetch"] =
          p.yes_no("Do you want to enable FSDP's forward prefetch?", false) ? "true" : "false";
      block["fsdp_activation_checkpointing"] =
          p.yes_no("Do you want to enable FSDP activation checkpointing?", false) ? "true"
                                                                                  : "false";
      block["fsdp_auto_wrap_policy"] = "TRANSFORMER_BASED_WRAP";
      block["fsdp_state_dict_type"] = "SHARDED_STATE_DICT";
    }
  }
  std::string precision =
      p.choose("Do you wish to use mixed precision?", {"no", "fp16", "bf16"}, 0);
  top["distributed_type"] = type == "NO" ? "'NO'" : type;
  top["mixed_precision"] = precision == "no" ? "'no'" : precision;
  top["num_machines"] = std::to_string(machines);
  top["num_processes"] = std::to_string(processes);
  top["machine_rank"] = "0";
  top["use_cpu"] = "true";
  top["debug"] = "false";
  if (!block_name.empty()) {
    std::string lines;
    for (const auto& [k, v] : block) lines += "\n  " + k + ": " + v;
    top[block_name] = lines;
  }
  std::string yaml;
  for (const auto& [k, v] : top) yaml += k + ":" + (v[0] == '\n' ? v : " " + v) + "\n";
  return yaml;
}

std::string default_accelerate_config_path() {
  const char* hf = std::getenv("HF_HOME");
  if (hf && *hf) return std::string(hf) + "/accelerate/default_config.yaml";
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg && *xdg) return std::string(xdg) + "/huggingface/accelerate/default_config.yaml";
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : ".") +
         "/.cache/huggingface/accelerate/default_config.yaml";
}

}  // namespace braid::config
