// `braid config`: the questions `accelerate config` asks (machine, processes, DeepSpeed or FSDP
// with their main settings, precision), asked at a prompt, answered as an Accelerate YAML that
// braid (--accelerate-config, braid launch --config_file) and Accelerate itself both read.
#pragma once

#include <iosfwd>
#include <string>

namespace braid::config {

// Asks on `out`, reads answers line by line from `in` (an empty line takes the default shown in
// brackets; a bad answer is said so and asked again), and returns the YAML text. Throws when
// the input ends before every question is answered.
std::string ask_accelerate_config(std::istream& in, std::ostream& out);

// Where `accelerate config` saves by default: $HF_HOME/accelerate/default_config.yaml, HF_HOME
// defaulting to $XDG_CACHE_HOME/huggingface or ~/.cache/huggingface.
std::string default_accelerate_config_path();

}  // namespace braid::config
