// The Trainer's training checkpoints (Note [Resume], Note [Atomic save] in
// checkpoint/save_plan.h): opening the checkpoint a run resumes from, restoring the counters it
// carries, and saving (blocking or in the background).
#include "braid/train/trainer.h"

#include <chrono>
#include <cstdio>
#include <map>
#include <sstream>

#include "braid/checkpoint/checkpoint_writer.h"
#include "braid/checkpoint/resume.h"
#include "braid/comm/collective_guard.h"
#include "braid/core/device_backend.h"
#include "braid/core/error.h"

namespace braid::train {

using Clock = std::chrono::steady_clock;

namespace {

// The model a checkpoint was trained as must be the model it resumes as: a field that changes
// no shape (rope_theta, an epsilon, a token id) would otherwise change its meaning silently.
// Checkpoints of older versions carry no model config and are not checked.
void check_same_model(const std::string& saved, const std::string& now, const std::string& dir) {
  if (saved.empty() || saved == now) return;
  auto lines = [](const std::string& text) {
    std::vector<std::string> out;
    std::istringstream in(text);
    for (std::string l; std::getline(in, l);) {
      l.erase(0, l.find_first_not_of(' '));
      if (!l.empty() && l.back() == ',') l.pop_back();
      out.push_back(l);
    }
    return out;
  };
  const std::vector<std::string> a = lines(saved), b = lines(now);
  size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  auto at = [i](const std::vector<std::string>& v) { return i < v.size() ? v[i] : "(nothing)"; };
  BRAID_THROW("resume: checkpoint ", dir, " was trained as another model: ", at(a), " there, ",
              at(b),
              " in this run's model (model.*); resume it as the model it was "
              "trained as");
}

}  // namespace

// Note [Resume]: the weights come in through the runtime's fill (each rank reads what it
// materialises from whatever files hold them: its tp slices of each unit, under ZeRO-3 only its
// shards, MaterializeOptions::fill_range), the optimizer state through the optimizer's slices
// (each rank reads its own shard records' ranges), so any layout loads any other.
void Trainer::open_resume(const config::TrainConfig& given) {
  const std::string resume = cfg_.training.resume;
  const std::filesystem::path root = cfg_.checkpoint_dir();
  resume_ = checkpoint::open_resume_checkpoint(
      resume, root, world_.get(), [this](const std::string& s) { say(s); },
      [&](const checkpoint::CheckpointReader& r) { load_checkpoint(r, given); });
}

// Note [Verified reads] (checkpoint/verified_file.h): a newer checkpoint whose load met a bad
// block on some rank is passed over on every rank after the load; whatever it built (model,
// runtime, optimizer and their state) is dropped here and built afresh for the previous one.
void Trainer::load_checkpoint(const checkpoint::CheckpointReader& from,
                              const config::TrainConfig& given) {
  if (model_) {
    model_.reset();
    acc_.reset();
    cfg_ = given;
    start_runtime();
  }
  start_step_ = from.manifest().step;
  // Every rank opened the same checkpoint, so every rank stops here.
  BRAID_CHECK(start_step_ <= cfg_.training.max_steps, "resume: checkpoint '", from.dir().string(),
              "' is at step ", start_step_,
              ", beyond training.max_steps = ", cfg_.training.max_steps,
              " (raise training.max_steps to train on from it, or set training.resume: never to "
              "start over)");
  check_same_model(from.manifest().model_config, model_config_from(cfg_).to_hf_json(),
                   from.dir().string());
  DeviceScope on_device(device_);  // Note [Training device]
  build_model(&from);
  acc_->prepare_optimizer();
  comm::ProcessGroup* replicas = acc_->parallelism().data().optimizer_replicas();
  comm::all_ranks_or_throw(world_.get(), [&] { from.read_optimizer(acc_->optimizer(), replicas); });
  checkpoint_bytes_read_ = from.bytes_read();
}

void Trainer::report_resume() const {
  const checkpoint::Manifest& m = resume_->manifest();
  std::string line = "resuming from " + resume_->dir().string() + " (step " +
                     std::to_string(m.step) + ", " + format_bytes(m.total_bytes()) + ")";
  if (m.layout != acc_->describe() || m.world_size != world_size())
    line += "; layout changed: saved by " + m.layout + " on " + std::to_string(m.world_size) +
            " rank(s), now " + acc_->describe() + " on " + std::to_string(world_size());
  if (m.step == cfg_.training.max_steps)
    line += "; nothing left to train: training.max_steps is " + std::to_string(m.step);
  say(line);
}

// The data position follows from the samples consumed, so it holds under another micro-batch,
// accumulation or world size (Note [Resume]; batch_source.h on sample order).
void Trainer::restore_counters() {
  const checkpoint::Manifest& m = resume_->manifest();
  const int64_t samples = m.counter("samples");
  const int64_t per_batch = cfg_.training.micro_batch_size * dp_size();
  BRAID_CHECK(samples % per_batch == 0, "resume: the checkpoint has consumed ", samples,
              " samples, not a whole number of this run's micro-batches of ",
              cfg_.training.micro_batch_size, " x ", dp_size(),
              " ranks: keep training.global_batch_size a divisor of it");
  train_data_->seek(samples / per_batch);
  val_batches_ = m.counter("val_batches");
  if (val_data_) val_data_->seek(val_batches_);
  acc_->restore_loss_scale(m);
}

void Trainer::save_checkpoint(int64_t step, TrainResult* result) {
  MemoryScope scope(tracker_);
  acc_->synchronize();
  std::map<std::string, int64_t> counters = {
      {"samples", step * cfg_.training.global_batch_size},
      {"val_batches", val_batches_},
      {"global_batch_size", cfg_.training.global_batch_size}};
  checkpoint::SaveRequest req = acc_->save_request(cfg_.checkpoint_dir(), step, counters);
  req.model_config = model_->config().to_hf_json();
  if (options_.fault)
    req.fault = [f = options_.fault, step](const std::string& s) { f(step, "save:" + s); };
  if (options_.checkpoint_version > 0) req.version = options_.checkpoint_version;
  if (options_.checkpoint_block_bytes > 0) req.block_bytes = options_.checkpoint_block_bytes;
  if (!cfg_.checkpoint.async) {
    report_saved(checkpoint::save_checkpoint(world_.get(), acc_->optimizer(), req), result);
    return;
  }
  if (!async_save_) async_save_ = std::make_unique<checkpoint::AsyncSaver>();
  const auto t0 = Clock::now();
  if (auto previous = async_save_->start(world_.get(), acc_->optimizer(), req))
    report_saved(*previous, result);
  if (result) result->checkpoint_s += std::chrono::duration<double>(Clock::now() - t0).count();
}

void Trainer::poll_async_save(bool wait, TrainResult& result) {
  if (!async_save_ || !async_save_->pending()) return;
  const auto t0 = Clock::now();
  if (auto r = async_save_->poll(world_.get(), wait)) report_saved(*r, &result);
  result.checkpoint_s += std::chrono::duration<double>(Clock::now() - t0).count();
}

void Trainer::report_saved(const checkpoint::SaveResult& r, TrainResult* result) const {
  char line[320];
  int n = std::snprintf(line, sizeof line, "step %lld | checkpoint %s: %s in %.2f s (%.2f GB/s)",
                        static_cast<long long>(r.step), r.dir.c_str(),
                        format_bytes(r.bytes).c_str(), r.seconds,
                        r.seconds > 0 ? static_cast<double>(r.bytes) / r.seconds / 1e9 : 0.0);
  if (cfg_.checkpoint.async && n > 0 && static_cast<size_t>(n) < sizeof line)
    std::snprintf(line + n, sizeof line - static_cast<size_t>(n),
                  ", written in the background; training waited %.3f s", r.blocked_seconds);
  say(line);
  if (!result) return;
  ++result->checkpoints_saved;
  if (!cfg_.checkpoint.async) result->checkpoint_s += r.blocked_seconds;
}

}  // namespace braid::train
