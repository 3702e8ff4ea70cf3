#include "braid/cli/model_option.h"

#include <filesystem>

#include "braid/core/error.h"
#include "braid/nn/model_config.h"

namespace braid::cli {

void set_model_option(config::TrainConfig& cfg, const std::string& model) {
  namespace fs = std::filesystem;
  cfg.model.preset.clear();
  cfg.model.config.clear();
  cfg.model.init_from.clear();
  if (fs::is_directory(model)) {
    cfg.model.config = (fs::path(model) / "config.json").string();
  } else if (model.ends_with(".json") || fs::exists(model)) {
    cfg.model.config = model;
  } else {
    // Throws naming the preset and the known ones.
    try {
      nn::ModelConfig::preset(model);
    } catch (const Error& e) {
      BRAID_THROW("--model: ", e.what());
    }
    cfg.model.preset = model;
  }
}

}  // namespace braid::cli
