#include "braid/train/trainer_output.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <sstream>
#include <thread>

#include "braid/checkpoint/hf_model_io.h"
#include "braid/core/memory_tracker.h"
#include "braid/data/tokenizer.h"
#include "braid/kernels/ops.h"
#include "braid/launch/threads.h"
#include "braid/train/generate.h"
#include "braid/train/plan_config.h"
#include "braid/train/trainer.h"

namespace braid::train {

namespace fs = std::filesystem;

namespace {

// Note [Output paths checked at start]. `key` = `value` is the config entry that puts `what` in
// `dir`.
void check_writable_dir(const std::string& key, const std::string& value, const std::string& what,
                        const fs::path& dir) {
  const std::string where =
      key + " '" + value + "': cannot write " + what + " to '" + dir.string() + "': ";
  fs::path existing = dir;
  std::error_code ec;
  while (!existing.empty() && !fs::exists(existing, ec)) existing = existing.parent_path();
  if (existing.empty()) existing = ".";
  if (!fs::is_directory(existing, ec))
    BRAID_THROW(where, "'", existing.string(), "' is ",
                fs::is_regular_file(existing, ec) ? "a file" : "something else",
                ", not a directory");
  // Named by process and thread, so the ranks sharing a directory, as threads or processes,
  // probe apart (and another host's process of the same number makes the next name be tried).
  const std::string stem =
      ".braid-write-check-" + std::to_string(::getpid()) + "-" +
      std::to_string(std::hash<std::thread::id>{}(std::this_thread::get_id())) + "-";
  for (int attempt = 0;; ++attempt) {
    const fs::path probe = existing / (stem + std::to_string(attempt));
    const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd >= 0) {
      ::close(fd);
      ::unlink(probe.c_str());
      return;
    }
    const int saved = errno;
    if (saved != EEXIST || attempt == 100)
      BRAID_THROW(where, "cannot create a file in '", existing.string(),
                  "': ", std::strerror(saved));
  }
}

}  // namespace

void check_output_paths(const config::TrainConfig& cfg) {
  const auto& out = cfg.output;
  if (out.export_model)
    check_writable_dir("output.dir", out.dir, "the exported model", fs::path(out.dir) / "model");
  // Keys left at their defaults under output.dir are named as output.dir, which the user set.
  auto under_output = [&](const char* key, const std::string& value) {
    return value.empty() ? std::pair<std::string, std::string>{"output.dir", out.dir}
                         : std::pair<std::string, std::string>{key, value};
  };
  if (cfg.checkpoint.interval > 0) {
    const auto [key, value] = under_output("checkpoint.dir", cfg.checkpoint.dir);
    check_writable_dir(key, value, "training checkpoints", cfg.checkpoint_dir());
  }
  if (cfg.parallel.offload_optimizer == "nvme") {
    const auto [key, value] = under_output("parallel.offload_dir", cfg.parallel.offload_dir);
    check_writable_dir(key, value, "offload files", offload_dir_from(cfg));
  }
  const std::string& trace = cfg.parallel.pipeline_trace;
  if (!trace.empty() && cfg.parallel.pipeline_parallel_size > 1) {
    std::error_code ec;
    BRAID_CHECK(!fs::is_directory(trace, ec), "parallel.pipeline_trace '", trace,
                "' is a directory; it names the trace file to write");
    check_writable_dir("parallel.pipeline_trace", trace, "the pipeline trace",
                       fs::path(trace).parent_path());
  }
  // The samples' tokenizer is read at the end of the run: a bad one is named now instead.
  if (out.samples > 0 && !cfg.data.tokenizer.empty()) {
    try {
      data::Tokenizer::from_path(cfg.data.tokenizer);
    } catch (const Error& e) {
      BRAID_THROW("data.tokenizer (for output.samples): ", e.what());
    }
  }
}

std::string describe_run(const config::TrainConfig& cfg, const nn::Transformer& model,
                         const Accelerator& acc, int world, const std::string& placement,
                         double peak_gflops, double flops_tok, const MfuPeak& peak) {
  const auto& t = cfg.training;
  std::ostringstream os;
  os << "model: " << model.config().summary() << "\n"
     << "params: " << model.config().num_parameters() << " ("
     << format_bytes(model.layout().num_parameters() * 4) << " fp32)\n"
     << "strategy: " << acc.describe() << "; " << world << " rank(s) x "
     << launch::threads_per_rank() << " thread(s); batch: global " << t.global_batch_size
     << " = micro " << t.micro_batch_size << " x accumulation " << t.gradient_accumulation_steps
     << " x dp " << acc.dp_size() << ", seq " << cfg.data.seq_len << "\n";
  if (!placement.empty()) os << "hosts: " << placement << "\n";
  os << "precision: " << cfg.training.precision;
  if (cfg.compute_dtype() != DType::f32)
    os << " (forward and backward in " << dtype_name(cfg.compute_dtype())
       << "; f32 master weights, gradients and optimizer state)";
  os << "\n"
     << "MFU = tokens/s x " << std::llround(flops_tok / 1e6) << " MFLOP/token (6N + 12LTC) / "
     << peak.source << " " << dtype_name(cfg.compute_dtype()) << " GEMM peak "
     << std::llround(peak_gflops) << " GFLOP/s ("
     << (peak.engine.empty() ? kernels::gemm_backend_name() : peak.engine.c_str())
     << ", summed over ranks)";
  return os.str();
}

std::string format_loss(double loss) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.4f (ppl %.1f)", loss, std::exp(loss));
  return buf;
}

std::string format_summary(const TrainResult& r, double rss_mib, int world) {
  char buf[640];
  char b[32] = "";
  if (r.bubble >= 0) std::snprintf(b, sizeof b, " bubble=%.4f", r.bubble);
  const std::string bubble = b;
  std::snprintf(buf, sizeof buf,
                "summary: steps=%lld world=%d tokens_per_s=%.1f step_ms=%.1f mfu=%.4f "
                "first_loss=%.4f last_loss=%.4f first_val_loss=%.4f val_loss=%.4f "
                "peak_tracked_mib=%.1f peak_rss_mib=%.1f exposed_comm_ms=%.2f skipped_steps=%lld%s",
                static_cast<long long>(r.steps), world, r.tokens_per_s, r.step_ms, r.mfu,
                r.first_loss, r.last_loss, r.first_val_loss, r.last_val_loss,
                static_cast<double>(r.peak_tracked_bytes) / 1048576.0, rss_mib, r.exposed_comm_ms,
                static_cast<long long>(r.skipped_steps), bubble.c_str());
  return buf;
}

std::function<void(int, Tensor&)> initial_weights(const config::TrainConfig& cfg,
                                                  const nn::Transformer& model) {
  if (cfg.model.init_from.empty()) return {};
  auto reader = std::make_shared<checkpoint::HfWeightReader>(model, cfg.model.init_from);
  return [reader, &model](int u, Tensor& unit) { reader->read_unit(model.global_unit(u), unit); };
}

void write_outputs(const config::TrainConfig& cfg, nn::Transformer& model, Accelerator& acc,
                   const LastLogits& logits, bool is_rank0, bool quiet) {
  const auto& out = cfg.output;
  if (out.export_model) {
    fs::path dir = fs::path(out.dir) / "model";
    auto units = [&acc](const std::function<void(int, const Tensor&)>& visit) {
      acc.for_each_full_unit(visit);
    };
    checkpoint::export_hf(model, dir, units, is_rank0);
    // The tokenizer goes with the model (data.tokenizer's, else the one beside model.init_from),
    // so Hugging Face loads both from the directory.
    std::string tok = cfg.data.tokenizer.empty() ? cfg.model.init_from : cfg.data.tokenizer;
    if (!tok.empty() && fs::is_regular_file(tok)) tok = fs::path(tok).parent_path().string();
    std::vector<std::string> tok_files;
    if (is_rank0 && !tok.empty()) tok_files = data::export_tokenizer_files(tok, dir.string());
    std::string also;
    for (const std::string& f : tok_files) also += " + " + f;
    if (!quiet && is_rank0)
      std::printf("exported %s (model.safetensors + config.json%s)\n", dir.c_str(), also.c_str());
  }
  // Every rank generates in lockstep (a sharded model gathers its units on every rank); the
  // samples are the same bits everywhere and rank 0 prints them.
  if (out.samples <= 0 || cfg.data.tokenizer.empty() || quiet) return;
  const auto tok = data::Tokenizer::from_path(cfg.data.tokenizer);
  Rng rng(cfg.training.seed + 17);
  SampleOptions so;
  so.max_new_tokens = out.sample_tokens;
  so.stop_token = stop_token_of(model.config(), tok->eos_id());
  std::vector<int32_t> prompt = tok->encode(out.sample_prompt);
  for (int64_t i = 0; i < out.samples; ++i) {
    std::vector<int32_t> ids =
        sample(logits, model.config().max_seq_len, model.config().vocab_size, prompt, so, rng);
    if (!is_rank0) continue;
    std::printf("--- sample %lld ---\n%s\n", static_cast<long long>(i + 1),
                tok->decode_text(ids).c_str());
  }
}

}  // namespace braid::train
