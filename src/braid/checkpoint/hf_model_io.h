// Export / import of a Transformer as a HuggingFace model directory: config.json +
// model.safetensors, with HF's exact tensor names and layouts, loadable by
// transformers' GPT2LMHeadModel / LlamaForCausalLM (and by tools/reference.py).
//
// braid's parameter names are already HF's (nn/transformer.h); the only layout difference is
// GPT-2's Conv1D, which stores attn.c_attn, attn.c_proj, mlp.c_fc and mlp.c_proj weights as
// [in, out], the transpose of a Linear's [out, in]. A tied lm_head.weight is not exported and
// is accepted (and ignored) on import. Import also accepts GPT2Model-style names without the
// "transformer." prefix, old GPT-2 causal-mask buffers (attn.bias, attn.masked_bias), BF16/F16
// files (converted to f32), and sharded checkpoints (model.safetensors.index.json). Missing,
// unexpected or mis-shaped tensors are errors naming them.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "braid/core/tensor.h"
#include "braid/nn/transformer.h"

namespace braid::checkpoint {

struct HfTensor {
  std::string name;  // HF name = braid parameter name
  Shape hf_shape;    // shape in the HF file
  bool transposed;   // GPT-2 Conv1D: HF stores the transpose of braid's [out, in]
};

// Every tensor an HF export of `model` holds, in braid's flat (first-use) order.
std::vector<HfTensor> hf_tensor_layout(nn::Transformer& model);

// The parameter value (or, with gradient, its gradient) in HF layout: a view of the flat
// buffer when not transposed, otherwise a transposed copy.
Tensor to_hf_layout(nn::Transformer& model, const HfTensor& t, bool gradient = false);

struct HfExportOptions {
  DType dtype = DType::f32;  // f32, bf16 or f16 in the file
};

// Writes dir/config.json and dir/model.safetensors (each written to a temporary name first
// and renamed), streaming one tensor at a time. Creates dir when needed.
void export_hf(nn::Transformer& model, const std::filesystem::path& dir,
               const HfExportOptions& options = {});

// Builds a model from dir/config.json and loads its weights.
std::unique_ptr<nn::Transformer> import_hf(const std::filesystem::path& dir,
                                           bool allocate_grads = true);

// Loads the weights of an HF model directory into an existing model of the same config.
void load_hf_weights(nn::Transformer& model, const std::filesystem::path& dir);

}  // namespace braid::checkpoint
