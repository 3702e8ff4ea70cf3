#include "braid/nn/transformer.h"

#include "braid/autograd/functions.h"
#include "braid/nn/layer_norm.h"
#include "braid/nn/rms_norm.h"

namespace braid::nn {

namespace {
constexpr int32_t kIgnoreIndex = -100;  // targets rows of -100 count nowhere (HF's convention)

// A plain named container ("transformer", "model").
class Container : public Module {
 public:
  using Module::register_module;
};
}  // namespace

Transformer::Transformer(const ModelConfig& cfg, const TransformerOptions& opts)
    : cfg_(cfg), tp_(opts.tensor_parallel), cp_(opts.context_parallel) {
  cfg_.validate();
  if (tp_) cfg_.validate_tensor_parallel(tp_->size());
  const bool g = cfg_.is_gpt2();
  const int64_t C = cfg_.d_model;
  const float eps = static_cast<float>(cfg_.norm_eps);
  // Declaration order = first use in forward = flat layout.
  auto* trunk = register_module(g ? "transformer" : "model", std::make_unique<Container>());
  wte_ = trunk->register_module(g ? "wte" : "embed_tokens",
                                std::make_unique<Embedding>(cfg_.vocab_size, C, 0.02f, tp_, true));
  if (g) wpe_ = trunk->register_module("wpe", std::make_unique<Embedding>(cfg_.max_seq_len, C));
  blocks_ = trunk->register_module(g ? "h" : "layers", std::make_unique<ModuleList<Block>>());
  for (int64_t i = 0; i < cfg_.n_layer; ++i) {
    blocks_->append(std::make_unique<Block>(cfg_, tp_, cp_));
    (*blocks_)[static_cast<size_t>(i)].attention().set_layout_source(&layout_);
  }
  if (g) {
    final_norm_ = trunk->register_module("ln_f", std::make_unique<LayerNorm>(C, eps, tp_));
  } else {
    final_norm_ = trunk->register_module("norm", std::make_unique<RMSNorm>(C, eps, tp_));
  }
  lm_head_ =
      cfg_.tie_word_embeddings
          ? register_module("lm_head", std::make_unique<LmHead>(wte_))
          : register_module("lm_head", std::make_unique<LmHead>(C, cfg_.vocab_size, 0.02f, tp_));
  if (tp_) {
    // Replicated parameters count once in the global norm (Note [Model-parallel norm]).
    for (auto& [name, p] : named_parameter_slots())
      if (!p->tp.is_split()) p->tp.counts_in_norm = tp_->rank() == 0;
  }
  if (tp_) {
    TransformerOptions whole;
    whole.materialize = false;
    full_ = std::make_unique<Transformer>(cfg, whole);
  }

  std::vector<UnitDecl> units;
  UnitDecl emb{"embeddings", {wte_}};
  if (wpe_) emb.owners.push_back(wpe_);
  if (lm_head_->is_tied()) emb.borrowers.push_back(lm_head_);
  units.push_back(emb);
  for (size_t i = 0; i < blocks_->size(); ++i)
    units.push_back({"block." + std::to_string(i), {&(*blocks_)[i]}});
  units.push_back({"head", {final_norm_, lm_head_}});
  declare_units(units);
  if (opts.pipeline) keep_stage(*opts.pipeline);

  if (opts.materialize) {
    materialize(opts.allocate_grads);
    if (opts.init_weights) init_weights(opts.seed);
  }
}

// The last stage's replica of the embeddings (Note [Pipeline stage]): the LM head reads the
// token table only, so GPT-2's position table there is frozen.
void Transformer::freeze_replica_extras() {
  if (!wpe_) return;
  for (auto& [name, p] : wpe_->named_parameter_slots()) p->requires_grad = false;
}

std::vector<std::string> Transformer::tied_parameters() const {
  if (!lm_head_->is_tied()) return {};
  return {full_layout().params().front().name};  // the token table
}

void Transformer::check_ids(const Tensor& ids, const char* what) const {
  BRAID_CHECK(ids.defined() && ids.dtype() == DType::i32 && ids.dim() == 2, "Transformer: ", what,
              " must be an i32 tensor [B, T], got ",
              ids.defined() ? std::string(dtype_name(ids.dtype())) + " " + ids.shape().str()
                            : std::string("undefined"));
  BRAID_CHECK(ids.size(1) <= cfg_.max_seq_len, "Transformer: ", what, " has sequence length ",
              ids.size(1), " > max_seq_len ", cfg_.max_seq_len);
}

void Transformer::set_activation_checkpointing(const CheckpointPolicy& policy) {
  policy.validate();
  cfg_.activation_checkpointing = policy;
}

Variable Transformer::hidden(const Tensor& ids) {
  return (*final_norm_)(trunk(ids));
}

Variable Transformer::trunk(const Tensor& ids) {
  begin_forward(ids);
  return run_layers(embed(ids), 0, cfg_.n_layer);
}

bool Transformer::splits_context() const {
  return cp_ && cp_->active();
}

void Transformer::begin_forward(const Tensor& ids) {
  check_ids(ids, "ids");
  int64_t T = ids.size(1);
  if (splits_context()) {
    cp_->check_seq_len(T);
    T /= cp_->size();  // this rank's tokens (Note [Context-parallel layout])
  }
  if (tp_) {
    const int64_t tokens = ids.size(0) * T;
    BRAID_CHECK(!tp_->sequence_parallel() || tokens % tp_->size() == 0,
                "sequence parallelism splits the batch's ", tokens, " tokens (", ids.size(0), " x ",
                T, ") over tensor_parallel_size ", tp_->size(),
                ": the micro-batch's token count must divide by it");
    tp_->set_seq_len(T);
  }
}

void Transformer::set_packed_positions(const Tensor& positions) {
  if (!positions.defined()) {
    layout_.reset();
    return;
  }
  BRAID_CHECK(!splits_context(),
              "packed rows (several examples a row) do not run under context parallelism yet: "
              "prepare the data with --layout pad");
  layout_ = SequenceLayout::from_positions(positions);
}

Variable Transformer::embed(const Tensor& ids) {
  if (layout_ && wpe_) {
    // Note [Packed rows]: each token's learned position is its place in its example.
    BRAID_CHECK(ids.size(0) == layout_->batch && ids.size(1) == layout_->seq_len,
                "Transformer: the packed-row layout [", layout_->batch, ", ", layout_->seq_len,
                "] does not match ids ", ids.shape().str());
    const Variable e = (*wte_)(ids.view(Shape{1, ids.numel()}), wpe_, layout_->positions);
    return e.shape().dim() == 3
               ? autograd::reshape(e, Shape{ids.size(0), ids.size(1), e.shape()[2]})
               : e;  // sequence-parallel rows stay flat
  }
  if (!splits_context()) return (*wte_)(ids, wpe_);  // [B, T, C]
  const Tensor mine = cp_->take_tokens(ids);
  return (*wte_)(mine, wpe_, wpe_ ? cp_->positions(mine.size(1)) : Tensor());  // [B, T / cp, C]
}

// Note [Checkpoint policies]: block i with policy.applies_to(i) keeps less for backward.
// full: the block is one autograd::checkpoint (Note [Checkpoint rerun]), so only its input
// stays alive and backward reruns the whole block, hooks included. selective: the block keeps
// its residual stream and MLP activations and backward reruns its attention sublayer (Note
// [Selective recompute], block.cpp).
// Either way each parameter sits in exactly one checkpointed function and gradients are
// bit-identical to keeping everything. Without recording (eval, logits) nothing is kept anyway.
Variable Transformer::run_layers(Variable x, int64_t begin, int64_t end) {
  const CheckpointPolicy& ac = cfg_.activation_checkpointing;
  const bool recording = autograd::grad_enabled();
  for (int64_t i = begin; i < end; ++i) {
    Block* b = &(*blocks_)[static_cast<size_t>(i)];
    if (!recording || !ac.applies_to(i)) {
      x = (*b)(x);
    } else if (ac.kind == CheckpointPolicy::Kind::full) {
      x = autograd::checkpoint([b](const Variable& v) { return (*b)(v); }, x);
    } else {
      x = b->call_selective(x);
    }
  }
  return x;
}

Variable Transformer::head_loss(const Variable& x, const Tensor& targets, double denominator) {
  Variable h = (*final_norm_)(x);
  Variable rows = autograd::reshape(h, Shape{h.shape().numel() / cfg_.d_model, cfg_.d_model});
  const Tensor mine = splits_context() ? cp_->take_tokens(targets) : targets;
  return lm_head_->loss(rows, mine.view(Shape{mine.numel()}), denominator, kIgnoreIndex);
}

Tensor Transformer::head_logits(const Variable& x) {
  autograd::NoGradGuard no_grad;
  Variable h = (*final_norm_)(x);
  return lm_head_->logits(
      autograd::reshape(h, Shape{h.shape().numel() / cfg_.d_model, cfg_.d_model}));
}

Variable Transformer::loss(const Tensor& ids, const Tensor& targets, double denominator) {
  check_ids(targets, "targets");
  BRAID_CHECK(targets.shape() == ids.shape(), "Transformer::loss: targets ", targets.shape().str(),
              " do not match ids ", ids.shape().str());
  // [B, T, C], or this rank's rows under sequence parallelism
  return head_loss(trunk(ids), targets, denominator);
}

Tensor Transformer::logits(const Tensor& ids) {
  autograd::NoGradGuard no_grad;
  const ContextParallel::Suspend whole(cp_);  // every position's logits, on every rank
  const int64_t B = ids.size(0), T = ids.size(1);
  return head_logits(trunk(ids)).view(Shape{B, T, cfg_.vocab_size});
}

Tensor Transformer::last_logits(const Tensor& ids) {
  autograd::NoGradGuard no_grad;
  const ContextParallel::Suspend whole(cp_);  // the last position lives on one cp rank only
  return head_last_logits(trunk(ids));
}

Tensor Transformer::head_last_logits(const Variable& x) {
  autograd::NoGradGuard no_grad;
  // Only the last position is needed; tensor parallelism computes every row's logits (its rows
  // may be spread over the tp ranks).
  const int64_t C = cfg_.d_model, rows = x.shape().numel() / C;
  Tensor all = head_logits(tp_ ? x : Variable(x.value().view(Shape{rows, C}).narrow(rows - 1, 1)));
  return all.narrow(all.size(0) - 1, 1);
}

}  // namespace braid::nn
