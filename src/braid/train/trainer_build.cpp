// Trainer's set-up (trainer.h): the parallel runtime, the model (fresh or from a checkpoint),
// frozen parameters, the data, and the advice an OutOfMemory at start carries.
#include <algorithm>
#include <string>

#include "braid/comm/collective_guard.h"
#include "braid/parallel/estimate/memory_estimate.h"
#include "braid/train/trainer.h"
#include "braid/train/trainer_output.h"
#include "braid/train/training_device.h"

namespace braid::train {

// Note [Memory advice]: an OutOfMemory at start says what each strategy would keep per rank for
// this model and world, so the user sees at once whether sharding helps or more ranks are needed.
std::string Trainer::memory_advice() const {
  nn::TransformerOptions declared;
  declared.materialize = false;
  const nn::Transformer model(model_config_from(cfg_), declared);
  const nn::ParamLayout& layout = model.layout();
  int64_t largest = 0;
  for (const auto& u : layout.units()) largest = std::max(largest, u.numel);
  // The ranks ZeRO shards over: dp x cp (the cp ranks of a batch share its sharding).
  const int n = acc_ ? acc_->loss_shares()
                     : static_cast<int>(config::data_parallel_size(cfg_, world_size()) *
                                        cfg_.parallel.context_parallel_size);
  const auto estimates = parallel::estimate_training_state(layout.num_parameters(), largest, n);
  std::string s = "Training state per rank on " + std::to_string(n) +
                  " rank(s) (parameters, gradients, AdamW state; activations not included): " +
                  parallel::describe_estimates(estimates) + "; budget " +
                  format_bytes(tracker_->budget()) + ".";
  if (tracker_->budget() > 0 && estimates.back().total() > tracker_->budget())
    s += " Not even zero3 fits: use more ranks, offload (parallel.offload_optimizer / "
         "offload_params) or a larger memory.budget.";
  return s;
}

Trainer::~Trainer() = default;

void Trainer::start_runtime() {
  // The config's agreement across ranks, the memory budget, the parallel runtime and the
  // resolved batch arithmetic.
  comm::all_ranks_or_throw(world_.get(), [&] { device_ = training_device(cfg_); });
  // The runtime's collectives on the device's own group where there is one (NCCL); the trainer's
  // own agreements stay on world_, in host memory.
  runtime_world_ = device_world(cfg_, device_, world_.get());
  acc_ = std::make_unique<Accelerator>(cfg_, runtime_world_ ? runtime_world_ : world_, tracker_);
  cfg_ = acc_->config();
  comm::all_ranks_or_throw(world_.get(), [&] { check_output_paths(cfg_); });
}

void Trainer::build_model(const checkpoint::CheckpointReader* from) {
  // Each node may keep model.config at its own place: one that cannot read it fails every rank.
  nn::ModelConfig mc;
  comm::all_ranks_or_throw(world_.get(), [&] { mc = model_config_from(cfg_); });
  model_ = std::make_unique<nn::Transformer>(mc, acc_->model_options());
  freeze_parameters();
  std::function<void(int, Tensor&)> fill;
  std::function<void(int, int64_t, int64_t, Tensor)> fill_range;
  if (from) {
    // Each rank reads only what it keeps: its tp slices, and under ZeRO-3 its shards.
    const nn::Transformer* model = model_.get();
    fill = [from, model](int u, Tensor& unit) {
      from->read_unit(model->full_layout(), model->global_unit(u), unit);
    };
    fill_range = [from, model](int u, int64_t begin, int64_t end, Tensor part) {
      from->read_unit_range(model->layout(), u, begin, end, std::move(part));
    };
  } else {
    fill = initial_weights(cfg_, *model_);
  }
  acc_->prepare(*model_, std::move(fill), std::move(fill_range));
}

void Trainer::freeze_parameters() {
  std::string list = cfg_.model.freeze;
  size_t at = 0;
  while (at <= list.size()) {
    size_t comma = list.find(',', at);
    if (comma == std::string::npos) comma = list.size();
    std::string prefix = list.substr(at, comma - at);
    prefix.erase(0, prefix.find_first_not_of(' '));
    prefix.erase(prefix.find_last_not_of(' ') + 1);
    at = comma + 1;
    if (prefix.empty()) continue;
    int matched = 0;
    for (auto& [name, p] : model_->named_parameter_slots()) {
      if (name.rfind(prefix, 0) != 0) continue;
      p->requires_grad = false;
      ++matched;
    }
    BRAID_CHECK(matched > 0, "model.freeze: '", prefix, "' is the start of no parameter name (",
                "names look like '", model_->layout().params().front().name, "')");
  }
}

Tensor Trainer::gather_parameters() {
  return acc_->gather_parameters(*model_);
}

void Trainer::build_data() {
  const auto& t = cfg_.training;
  const int64_t vocab = model_->config().vocab_size;
  if (cfg_.data.random_tokens) {
    int64_t v = cfg_.data.vocab_size > 0 ? cfg_.data.vocab_size : vocab;
    BRAID_CHECK(v <= vocab, "data.vocab_size ", v, " exceeds the model's vocab_size ", vocab);
    train_data_ = std::make_unique<RandomTokenSource>(t.micro_batch_size, cfg_.data.seq_len, v,
                                                      t.seed, dp_rank(), dp_size());
    return;
  }
  data::DataLoaderOptions lo;
  lo.batch_size = t.micro_batch_size;
  lo.seq_len = cfg_.data.seq_len;
  lo.world = dp_size();
  lo.rank = dp_rank();
  lo.seed = t.seed;
  lo.shuffle = true;
  lo.drop_last = true;
  lo.vocab_size = vocab;
  // Instruction data comes in rows of seq_len + 1 tokens, one sample a row (Note [Token flags]).
  const data::TokenDataset::RowLayout rows = data::TokenDataset::row_layout(cfg_.data.train);
  if (const int64_t row = rows.row_tokens; row > 0) {
    BRAID_CHECK(row == cfg_.data.seq_len + 1, "data.train '", cfg_.data.train, "' holds rows of ",
                row, " tokens (meta.json row_tokens), prepared for seq_len ", row - 1,
                ", but data.seq_len is ", cfg_.data.seq_len);
    lo.stride = row;
  }
  // Packed rows (Note [Packed rows], nn/sequence_layout.h): each row's positions come along.
  if (rows.packed) {
    const auto& p = cfg_.parallel;
    BRAID_CHECK(p.context_parallel_size == 1, "data.train '", cfg_.data.train,
                "' packs several examples a row, which does not run with "
                "parallel.context_parallel_size > 1 yet: prepare it with --layout pad");
    lo.positions = true;
  }
  // The loader checks the sample count against world size and micro-batch, with the numbers.
  train_data_ = std::make_unique<ShardSource>(cfg_.data.train, "train", lo);
  if (t.eval_batches > 0) {
    lo.shuffle = false;
    lo.drop_last = false;
    val_data_ = std::make_unique<ShardSource>(cfg_.data.train, "val", lo);
  }
}

}  // namespace braid::train
