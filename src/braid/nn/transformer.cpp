#include "braid/nn/transformer.h"

#include "braid/autograd/functions.h"
#include "braid/nn/layer_norm.h"
#include "braid/nn/rms_norm.h"

namespace braid::nn {

namespace {
// A plain named container ("transformer", "model").
class Container : public Module {
 public:
  using Module::register_module;
};
}  // namespace

Transformer::Transformer(const ModelConfig& cfg, const TransformerOptions& opts)
    : cfg_(cfg), tp_(opts.tensor_parallel) {
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
  for (int64_t i = 0; i < cfg_.n_layer; ++i) blocks_->append(std::make_unique<Block>(cfg_, tp_));
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
  layout_ = ParamLayout(*this, units);

  if (opts.materialize) {
    materialize(opts.allocate_grads);
    if (opts.init_weights) flat_.init(opts.seed);
  }
}

void Transformer::materialize(bool allocate_grads, int64_t pad_multiple, DType compute,
                              bool masters) {
  BRAID_CHECK(!flat_.defined(), "Transformer: the model is already materialised");
  flat_ = FlatBuffer(layout_.with_padding(pad_multiple), allocate_grads, compute, masters);
}

FlatBuffer& Transformer::flat() {
  BRAID_CHECK(flat_.defined(),
              "Transformer: the model is not materialised in one buffer (a "
              "sharded strategy holds its parameters; gather them through the strategy)");
  return flat_;
}

const FlatBuffer& Transformer::flat() const {
  return const_cast<Transformer*>(this)->flat();
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

// Note [Checkpoint policies]: block i with policy.applies_to(i) keeps less for backward.
// full: the block is one autograd::checkpoint (Note [Checkpoint rerun]), so only its input
// stays alive and backward reruns the whole block, hooks included. selective: the block keeps
// its residual stream and MLP activations and backward reruns its attention sublayer (Note
// [Selective recompute], block.cpp).
// Either way each parameter sits in exactly one checkpointed function and gradients are
// bit-identical to keeping everything. Without recording (eval, logits) nothing is kept anyway.
Variable Transformer::hidden(const Tensor& ids) {
  check_ids(ids, "ids");
  if (tp_) {
    BRAID_CHECK(!tp_->sequence_parallel() || ids.numel() % tp_->size() == 0,
                "sequence parallelism splits the batch's ", ids.numel(), " tokens (", ids.size(0),
                " x ", ids.size(1), ") over tensor_parallel_size ", tp_->size(),
                ": the micro-batch's token count must divide by it");
    tp_->set_seq_len(ids.size(1));
  }
  const CheckpointPolicy& ac = cfg_.activation_checkpointing;
  const bool recording = autograd::grad_enabled();
  Variable x = (*wte_)(ids, wpe_);  // [B, T, C]
  for (size_t i = 0; i < blocks_->size(); ++i) {
    Block* b = &(*blocks_)[i];
    if (!recording || !ac.applies_to(static_cast<int64_t>(i))) {
      x = (*b)(x);
    } else if (ac.kind == CheckpointPolicy::Kind::full) {
      x = autograd::checkpoint([b](const Variable& v) { return (*b)(v); }, x);
    } else {
      x = b->call_selective(x);
    }
  }
  return (*final_norm_)(x);
}

Variable Transformer::loss(const Tensor& ids, const Tensor& targets, double denominator,
                           int32_t ignore_index) {
  check_ids(targets, "targets");
  BRAID_CHECK(targets.shape() == ids.shape(), "Transformer::loss: targets ", targets.shape().str(),
              " do not match ids ", ids.shape().str());
  const int64_t N = ids.numel();
  Variable h = hidden(ids);  // [B, T, C], or this rank's rows under sequence parallelism
  Variable x = autograd::reshape(h, Shape{h.shape().numel() / cfg_.d_model, cfg_.d_model});
  return lm_head_->loss(x, targets.view(Shape{N}), denominator, ignore_index);
}

Tensor Transformer::logits(const Tensor& ids) {
  autograd::NoGradGuard no_grad;
  const int64_t B = ids.size(0), T = ids.size(1);
  Variable h = hidden(ids);
  Variable x = autograd::reshape(h, Shape{h.shape().numel() / cfg_.d_model, cfg_.d_model});
  return lm_head_->logits(x).view(Shape{B, T, cfg_.vocab_size});
}

}  // namespace braid::nn
