// The --model option of the commands that look at a model without training it (estimate-memory,
// plan): a preset, an HF config.json, or a directory holding one, set on a TrainConfig's model
// section in place of what a config gave.
#pragma once

#include <string>

#include "braid/config/config.h"

namespace braid::cli {

// Throws naming --model and the known presets when `model` is none of them.
void set_model_option(config::TrainConfig& cfg, const std::string& model);

}  // namespace braid::cli
