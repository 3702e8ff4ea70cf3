#include "braid/checkpoint/hf_model_io.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "braid/checkpoint/safetensors.h"

namespace braid::checkpoint {

namespace fs = std::filesystem;

namespace {

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool is_conv1d(const nn::ModelConfig& cfg, const std::string& name) {
  if (!cfg.is_gpt2()) return false;
  for (const char* s :
       {".attn.c_attn.weight", ".attn.c_proj.weight", ".mlp.c_fc.weight", ".mlp.c_proj.weight"}) {
    if (ends_with(name, s)) return true;
  }
  return false;
}

// dst[cols, rows] = src[rows, cols]^T, f32.
void transpose_into(Tensor& dst, const Tensor& src) {
  const int64_t rows = src.size(0), cols = src.size(1);
  const float* s = src.data<float>();
  float* d = dst.data<float>();
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) d[c * rows + r] = s[r * cols + c];
  }
}

std::string list_names(const std::vector<std::string>& names) {
  std::ostringstream os;
  for (size_t i = 0; i < names.size() && i < 8; ++i)
    os << (i ? ", " : "") << "'" << names[i] << "'";
  if (names.size() > 8) os << " and " << names.size() - 8 << " more";
  return os.str();
}

// The safetensors files of a model directory and which file holds each tensor.
struct WeightFiles {
  std::vector<std::unique_ptr<SafetensorsReader>> readers;
  std::map<std::string, SafetensorsReader*> where;  // HF name as stored -> reader
};

WeightFiles open_weights(const fs::path& dir) {
  WeightFiles w;
  const fs::path single = dir / "model.safetensors";
  const fs::path index = dir / "model.safetensors.index.json";
  if (fs::exists(single)) {
    w.readers.push_back(std::make_unique<SafetensorsReader>(single));
  } else {
    BRAID_CHECK(fs::exists(index), "HF import: ", dir.string(),
                " has neither model.safetensors nor model.safetensors.index.json");
    std::ifstream f(index);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(f);
    } catch (const nlohmann::json::exception& e) {
      BRAID_THROW("HF import: ", index.string(), " is not valid JSON: ", e.what());
    }
    BRAID_CHECK(j.contains("weight_map") && j["weight_map"].is_object(),
                "HF import: ", index.string(), " has no 'weight_map' object");
    std::set<std::string> files;
    for (const auto& [name, file] : j["weight_map"].items()) {
      BRAID_CHECK(file.is_string(), "HF import: ", index.string(), ": weight_map entry '", name,
                  "' is not a file name");
      files.insert(file.get<std::string>());
    }
    for (const auto& file : files)
      w.readers.push_back(std::make_unique<SafetensorsReader>(dir / file));
  }
  for (auto& r : w.readers) {
    for (const auto& e : r->entries()) {
      auto [it, inserted] = w.where.emplace(e.name, r.get());
      BRAID_CHECK(inserted, "HF import: tensor '", e.name, "' appears in both ",
                  it->second->path().string(), " and ", r->path().string());
    }
  }
  return w;
}

}  // namespace

std::vector<HfTensor> hf_tensor_layout(const nn::Transformer& model) {
  const nn::ModelConfig& cfg = model.config();
  std::vector<HfTensor> out;
  for (const nn::ParamInfo& p : model.full_layout().params()) {
    // The parameter's shard record, whole: the name and full shape every layout agrees on.
    const ShardRecord r = p.whole();
    HfTensor t{r.name, r.global_shape, is_conv1d(cfg, r.name)};
    if (t.transposed) t.hf_shape = Shape{r.global_shape[1], r.global_shape[0]};
    out.push_back(std::move(t));
  }
  return out;
}

Tensor to_hf_layout(const HfTensor& t, const Tensor& value) {
  if (!t.transposed) return value;
  Tensor out = Tensor::empty(t.hf_shape, DType::f32, MemCategory::other);
  transpose_into(out, value);
  return out;
}

Tensor to_hf_layout(nn::Transformer& model, const HfTensor& t, bool gradient) {
  const auto& var = model.flat().entry(t.name).param->var;
  const Tensor& src = gradient ? var.grad() : var.value();
  BRAID_CHECK(src.defined(), "to_hf_layout: '", t.name, "' has no ",
              gradient ? "gradient" : "value");
  return to_hf_layout(t, src);
}

void export_hf(const nn::Transformer& model, const fs::path& dir, const UnitSource& units,
               bool write, const HfExportOptions& options) {
  BRAID_CHECK(is_floating(options.dtype), "HF export: dtype must be f32, bf16 or f16, got ",
              dtype_name(options.dtype));
  const auto layout = hf_tensor_layout(model);
  std::unique_ptr<SafetensorsWriter> writer;
  if (write) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    BRAID_CHECK(!ec, "HF export: cannot create ", dir.string(), ": ", ec.message());
    const fs::path config_tmp = dir / "config.json.tmp";
    model.config().save_hf_file(config_tmp);
    fs::rename(config_tmp, dir / "config.json", ec);
    BRAID_CHECK(!ec, "HF export: renaming ", config_tmp.string(), ": ", ec.message());
    std::vector<TensorSpec> specs;
    for (const auto& t : layout) specs.push_back({t.name, options.dtype, t.hf_shape});
    writer =
        std::make_unique<SafetensorsWriter>(dir / "model.safetensors", std::move(specs),
                                            std::map<std::string, std::string>{{"format", "pt"}});
  }
  const nn::ParamLayout& params = model.full_layout();
  units([&](int u, const Tensor& unit) {
    if (!writer) return;
    for (int i : params.units().at(static_cast<size_t>(u)).params) {
      const nn::ParamInfo& p = params.params()[static_cast<size_t>(i)];
      const HfTensor& t = layout[static_cast<size_t>(p.index)];
      writer->write(t.name,
                    to_hf_layout(t, unit.flat_range(p.unit_offset, p.numel).view(p.param->shape)));
    }
  });
  if (writer) writer->finish();
}

void export_hf(nn::Transformer& model, const fs::path& dir, const HfExportOptions& options) {
  nn::FlatBuffer& flat = model.flat();
  auto units = [&flat](const std::function<void(int, const Tensor&)>& visit) {
    for (size_t u = 0; u < flat.layout().units().size(); ++u) {
      const nn::FlatRange r = flat.unit_range(static_cast<int>(u));
      visit(static_cast<int>(u), flat.params().flat_range(r.offset, r.size));
    }
  };
  export_hf(model, dir, units, /*write=*/true, options);
}

struct HfWeightReader::Files {
  WeightFiles w;
};

HfWeightReader::HfWeightReader(const nn::Transformer& model, const fs::path& dir)
    : model_(model), dir_(dir), files_(std::make_unique<Files>()) {
  const nn::ModelConfig& cfg = model.config();
  files_->w = open_weights(dir);
  WeightFiles& files = files_->w;

  // Stored name -> braid name; drop what braid does not keep.
  std::vector<std::string> unexpected;
  std::set<std::string> expected;
  for (const auto& t : hf_tensor_layout(model)) expected.insert(t.name);
  for (const auto& [stored, reader] : files.where) {
    (void)reader;
    std::string name = stored;
    if (cfg.is_gpt2()) {
      if (ends_with(name, ".attn.bias") || ends_with(name, ".attn.masked_bias")) continue;
      if (name.rfind("transformer.", 0) != 0 && name.rfind("lm_head.", 0) != 0) {
        name = "transformer." + name;  // saved from GPT2Model
      }
    }
    if (name == "lm_head.weight" && cfg.tie_word_embeddings) continue;  // tied: the embedding
    if (!expected.count(name)) {
      unexpected.push_back(stored);
      continue;
    }
    stored_[name] = stored;
  }
  std::vector<std::string> missing;
  for (const auto& name : expected) {
    if (!stored_.count(name)) missing.push_back(name);
  }
  BRAID_CHECK(missing.empty(), "HF import from ", dir.string(), ": ", missing.size(),
              " tensor(s) missing for ", cfg.summary(), ": ", list_names(missing));
  BRAID_CHECK(unexpected.empty(), "HF import from ", dir.string(), ": ", unexpected.size(),
              " unexpected tensor(s) for ", cfg.summary(), ": ", list_names(unexpected));
  for (const auto& t : hf_tensor_layout(model)) {
    const std::string& stored = stored_.at(t.name);
    SafetensorsReader& reader = *files.where.at(stored);
    const SafetensorsEntry& e = reader.entry(stored);
    BRAID_CHECK(e.shape == t.hf_shape, "HF import: ", reader.path().string(), ": tensor '", stored,
                "' has shape ", e.shape.str(), ", expected ", t.hf_shape.str(),
                t.transposed ? " (GPT-2 Conv1D layout [in, out])" : "");
  }
}

HfWeightReader::~HfWeightReader() = default;

void HfWeightReader::read_unit(int u, Tensor& unit_params) {
  const nn::ParamLayout& params = model_.full_layout();
  const auto layout = hf_tensor_layout(model_);
  for (int i : params.units().at(static_cast<size_t>(u)).params) {
    const nn::ParamInfo& p = params.params()[static_cast<size_t>(i)];
    const HfTensor& t = layout[static_cast<size_t>(p.index)];
    const std::string& stored = stored_.at(t.name);
    SafetensorsReader& reader = *files_->w.where.at(stored);
    Tensor value = unit_params.flat_range(p.unit_offset, p.numel).view(p.param->shape);
    if (!t.transposed) {
      reader.read_into(stored, value);
    } else {
      Tensor tmp = Tensor::empty(t.hf_shape, DType::f32, MemCategory::other);
      reader.read_into(stored, tmp);
      transpose_into(value, tmp);
    }
  }
}

void load_hf_weights(nn::Transformer& model, const fs::path& dir) {
  HfWeightReader reader(model, dir);
  nn::FlatBuffer& flat = model.flat();
  for (size_t u = 0; u < flat.layout().units().size(); ++u) {
    const nn::FlatRange r = flat.unit_range(static_cast<int>(u));
    Tensor unit = flat.params().flat_range(r.offset, r.size);
    reader.read_unit(static_cast<int>(u), unit);
  }
}

std::unique_ptr<nn::Transformer> import_hf(const fs::path& dir, bool allocate_grads) {
  const nn::ModelConfig cfg = nn::ModelConfig::from_hf_file(dir / "config.json");
  nn::TransformerOptions opts;
  opts.init_weights = false;
  opts.allocate_grads = allocate_grads;
  auto model = std::make_unique<nn::Transformer>(cfg, opts);
  load_hf_weights(*model, dir);
  return model;
}

}  // namespace braid::checkpoint
