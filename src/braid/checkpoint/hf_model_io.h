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
#include <functional>
#include <map>
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

// Every tensor an HF export of `model` holds, in braid's layout (first-use) order.
std::vector<HfTensor> hf_tensor_layout(const nn::Transformer& model);

// A parameter tensor (braid layout, e.g. a view of its unit) in HF layout: itself when not
// transposed, otherwise a transposed copy.
Tensor to_hf_layout(const HfTensor& t, const Tensor& value);
// The parameter value (or, with gradient, its gradient) of a materialised model in HF layout.
Tensor to_hf_layout(nn::Transformer& model, const HfTensor& t, bool gradient = false);

struct HfExportOptions {
  DType dtype = DType::f32;  // f32, bf16 or f16 in the file
};

// Calls visit(u, params) for every unit u in order with the unit's full parameters (a buffer
// holding the unit alone); a sharded strategy gathers each unit in turn
// (parallel::Parallelism::for_each_full_unit), so no rank holds more than one gathered unit.
using UnitSource = std::function<void(const std::function<void(int, const Tensor&)>& visit)>;

// Writes dir/config.json and dir/model.safetensors (each written to a temporary name first
// and renamed), streaming one unit at a time from `units`. Every rank runs the unit loop (it may
// be collective); only a rank with `write` touches the files. Creates dir when needed.
void export_hf(const nn::Transformer& model, const std::filesystem::path& dir,
               const UnitSource& units, bool write, const HfExportOptions& options = {});
// The same for a model materialised in one buffer (model.flat()).
void export_hf(nn::Transformer& model, const std::filesystem::path& dir,
               const HfExportOptions& options = {});

// Reads an HF model directory's tensors for a declared model, unit by unit. Opening checks every
// name and shape against the model (missing, unexpected or mis-shaped tensors are errors naming
// them); read_unit fills one unit's parameters at their offsets in a buffer holding the unit.
class HfWeightReader {
 public:
  HfWeightReader(const nn::Transformer& model, const std::filesystem::path& dir);
  ~HfWeightReader();
  void read_unit(int unit, Tensor& unit_params);

 private:
  struct Files;
  const nn::Transformer& model_;
  std::filesystem::path dir_;
  std::unique_ptr<Files> files_;
  std::map<std::string, std::string> stored_;  // braid name -> name in the file
};

// Builds a model from dir/config.json and loads its weights.
std::unique_ptr<nn::Transformer> import_hf(const std::filesystem::path& dir,
                                           bool allocate_grads = true);

// Loads the weights of an HF model directory into a materialised model of the same config.
void load_hf_weights(nn::Transformer& model, const std::filesystem::path& dir);

}  // namespace braid::checkpoint
