#include "braid/parallel/cost/layout.h"

#include <sstream>

#include "braid/core/error.h"

namespace braid::parallel::cost {

std::string Layout::name() const {
  std::ostringstream os;
  os << strategy;
  if (strategy == "hsdp") os << ":" << shard_group;
  if (tp > 1) os << " tp" << tp << (sp ? "+sp" : "");
  if (pp > 1) {
    os << " pp" << pp << ":" << schedule;
    if (virtual_stages > 1) os << "/" << virtual_stages;
    if (balanced) os << " balanced";
  }
  if (cp > 1) os << " cp" << cp << ":" << cp_mode;
  os << " mb" << micro_batch << "x" << accumulation;
  if (compute != DType::f32) os << " " << (compute == DType::bf16 ? "bf16" : "fp16");
  if (checkpointing != "none") os << " ckpt:" << checkpointing;
  if (offload) os << " offload";
  return os.str();
}

Layout Layout::parse(const std::string& text) {
  Layout L;
  std::istringstream is(text);
  std::string part;
  bool first = true;
  auto number = [&](const std::string& s, const char* what) {
    BRAID_CHECK(!s.empty() && s.find_first_not_of("0123456789") == std::string::npos, "layout '",
                text, "': ", what, " must be a number, got '", s, "'");
    return std::stoll(s);
  };
  while (is >> part) {
    if (first) {
      if (part.starts_with("hsdp:")) {
        L.shard_group = static_cast<int>(number(part.substr(5), "hsdp:S"));
        part = "hsdp";
      }
      BRAID_CHECK(part == "none" || part == "ddp" || part == "zero1" || part == "zero2" ||
                      part == "zero3" || (part == "hsdp" && L.shard_group > 0),
                  "layout '", text,
                  "': the first part is the strategy (none, ddp, zero1, zero2, "
                  "zero3, hsdp:S with S ranks per shard group), got '",
                  part, "'");
      L.strategy = part;
      first = false;
    } else if (part.starts_with("tp")) {
      std::string v = part.substr(2);
      if (v.ends_with("+sp")) {
        L.sp = true;
        v.resize(v.size() - 3);
      }
      L.tp = static_cast<int>(number(v, "tpN"));
    } else if (part.starts_with("pp")) {
      const auto colon = part.find(':');
      L.pp = static_cast<int>(number(part.substr(2, colon - 2), "ppN"));
      if (colon != std::string::npos) {
        std::string sched = part.substr(colon + 1);
        const auto slash = sched.find('/');
        if (slash != std::string::npos) {
          L.virtual_stages = static_cast<int>(number(sched.substr(slash + 1), "the chunks"));
          sched.resize(slash);
        }
        L.schedule = sched;
      }
    } else if (part.starts_with("cp")) {
      const auto colon = part.find(':');
      L.cp = static_cast<int>(number(part.substr(2, colon - 2), "cpN"));
      if (colon != std::string::npos) L.cp_mode = part.substr(colon + 1);
      BRAID_CHECK(L.cp_mode == "ring" || L.cp_mode == "ulysses", "layout '", text,
                  "': cpN: takes ring or ulysses, got '", L.cp_mode, "'");
    } else if (part.starts_with("mb")) {
      const auto x = part.find('x');
      L.micro_batch = number(part.substr(2, x - 2), "mbB");
      if (x != std::string::npos) L.accumulation = number(part.substr(x + 1), "the accumulation");
    } else if (part == "bf16" || part == "fp16" || part == "fp32") {
      L.compute = part == "bf16" ? DType::bf16 : part == "fp16" ? DType::f16 : DType::f32;
    } else if (part.starts_with("ckpt:")) {
      L.checkpointing = part.substr(5);
      BRAID_CHECK(
          L.checkpointing == "none" || L.checkpointing == "full" || L.checkpointing == "selective",
          "layout '", text, "': ckpt: takes none, full or selective");
    } else if (part == "offload") {
      L.offload = true;
    } else if (part == "balanced") {
      L.balanced = true;
    } else {
      BRAID_THROW("layout '", text, "': unknown part '", part,
                  "' (parts: STRATEGY (hsdp:S) tpN[+sp] ppN:SCHEDULE[/V] balanced cpN:MODE mbBxM "
                  "bf16 ckpt:K offload)");
    }
  }
  BRAID_CHECK(!first, "layout is empty");
  BRAID_CHECK(L.tp >= 1 && L.pp >= 1 && L.cp >= 1 && L.micro_batch >= 1 && L.accumulation >= 1 &&
                  L.virtual_stages >= 1,
              "layout '", text, "': sizes must be >= 1");
  return L;
}

std::vector<std::pair<std::string, std::string>> Layout::config_values() const {
  std::vector<std::pair<std::string, std::string>> v;
  v.emplace_back("parallel.strategy", strategy == "hsdp" ? "fsdp" : strategy);
  if (strategy == "hsdp") {
    v.emplace_back("parallel.sharding_strategy", "HYBRID_SHARD");
    v.emplace_back("parallel.sharding_factor", std::to_string(shard_group));
  }
  v.emplace_back("parallel.tensor_parallel_size", std::to_string(tp));
  v.emplace_back("parallel.sequence_parallel", sp ? "true" : "false");
  v.emplace_back("parallel.pipeline_parallel_size", std::to_string(pp));
  if (pp > 1) {
    v.emplace_back("parallel.pipeline_schedule", schedule);
    v.emplace_back("parallel.pipeline_virtual_stages", std::to_string(virtual_stages));
    v.emplace_back("parallel.pipeline_balance", balanced ? "parameters" : "uniform");
  }
  v.emplace_back("parallel.context_parallel_size", std::to_string(cp));
  if (cp > 1) v.emplace_back("parallel.context_parallel_mode", cp_mode);
  v.emplace_back("training.micro_batch_size", std::to_string(micro_batch));
  v.emplace_back("training.gradient_accumulation_steps", std::to_string(accumulation));
  v.emplace_back("training.precision", compute == DType::bf16  ? "bf16"
                                       : compute == DType::f16 ? "fp16"
                                                               : "fp32");
  v.emplace_back("model.activation_checkpointing", checkpointing);
  const std::string off = offload ? "nvme" : "none";
  v.emplace_back("parallel.offload_optimizer", off);
  if (strategy == "zero3" || strategy == "hsdp") v.emplace_back("parallel.offload_params", off);
  return v;
}

ParallelPlan Layout::to_plan(int64_t seq_len) const {
  ParallelPlan p;
  p.name = strategy == "hsdp" ? "fsdp" : strategy;
  if (strategy == "hsdp") {
    p.sharding_strategy = "HYBRID_SHARD";
    p.sharding_factor = shard_group;
  }
  p.tensor_parallel_size = tp;
  p.sequence_parallel = sp;
  p.pipeline_parallel_size = pp;
  p.pipeline_schedule = schedule;
  p.pipeline_virtual_stages = virtual_stages;
  p.pipeline_balance = balanced ? "parameters" : "uniform";
  p.context_parallel_size = cp;
  p.context_parallel_mode = cp_mode;
  p.micro_batch_size = micro_batch;
  p.seq_len = seq_len;
  if (offload) {
    p.offload_optimizer = "nvme";
    if (strategy == "zero3" || strategy == "hsdp") p.offload_params = "nvme";
  }
  return p;
}

}  // namespace braid::parallel::cost
