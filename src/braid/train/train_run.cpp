#include "braid/train/train_run.h"

#include "braid/checkpoint/hf_model_io.h"
#include "braid/config/provenance.h"
#include "braid/core/error.h"
#include "braid/data/tokenizer.h"
#include "braid/launch/fault_plan.h"
#include "braid/launch/threads.h"
#include "braid/train/auto_plan.h"
#include "braid/train/trainer.h"

namespace braid::train {

void run_training(const RunConfigSources& sources, bool print_config) {
  std::string mapping;
  config::Provenance origins;
  config::TrainConfig cfg = load_run_config(sources, &mapping, &origins);
  if (print_config) {
    std::printf("%s%s", mapping.c_str(), config::dump_config(cfg, &origins).c_str());
    return;
  }
  auto world = launched_world(cfg);
  // parallel.strategy: auto says what it chose (Note [Auto plan]).
  if (const std::string chosen = auto_plan_line(mapping);
      !chosen.empty() && (!world || world->rank() == 0)) {
    std::printf("%s\n", chosen.c_str());
    std::fflush(stdout);
  }
  TrainerOptions options;
  // Fault tests only (launch/fault_plan.h): deaths at chosen points of chosen steps.
  auto plan =
      launch::FaultPlan::from_environment(world ? world->rank() : 0, launch::launch_attempt());
  if (!plan.empty()) {
    options.fault = [plan](int64_t step, const std::string& point) { plan.at(step, point); };
    options.inject_nan = [plan](int64_t step) { return plan.has(step, "nan"); };
  }
  try {
    Trainer trainer(cfg, world, options);
    trainer.run();
  } catch (const std::exception& e) {
    // Before `world` goes: its teardown waits for the other ranks, and the first of them to exit
    // makes mpirun end the job, maybe before this rank has said why.
    std::fprintf(stderr, "braid train: error: %s\n", e.what());
    std::fflush(stderr);
    throw ReportedError(e.what());
  }
}

void generate_samples(const GenerateRequest& r, FILE* out) {
  BRAID_CHECK(!r.model_dir.empty(), "missing --model DIR (an exported model directory)");
  BRAID_CHECK(r.sample.max_new_tokens > 0, "--tokens must be positive, got ",
              r.sample.max_new_tokens);
  BRAID_CHECK(r.sample.top_k >= 0, "--top-k must be >= 0, got ", r.sample.top_k);
  launch::apply_threads_per_rank();
  auto model = checkpoint::import_hf(r.model_dir, /*allocate_grads=*/false);
  auto tok = data::Tokenizer::from_path(r.tokenizer);
  BRAID_CHECK(tok->vocab_size() <= model->config().vocab_size, "tokenizer '", r.tokenizer, "' has ",
              tok->vocab_size(), " tokens but the model's vocab_size is ",
              model->config().vocab_size);
  SampleOptions so = r.sample;
  so.stop_token = stop_token_of(model->config(), tok->eos_id());
  Rng rng(r.seed);
  const std::vector<int32_t> ids = tok->encode(r.prompt);
  for (int64_t s = 0; s < r.samples; ++s) {
    if (r.samples > 1) std::fprintf(out, "--- sample %lld ---\n", static_cast<long long>(s + 1));
    std::fprintf(out, "%s\n", tok->decode_text(sample(*model, ids, so, rng)).c_str());
  }
}

}  // namespace braid::train
