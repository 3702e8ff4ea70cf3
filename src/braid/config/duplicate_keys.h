// Duplicate keys in a config file. YAML and JSON both say a mapping's keys are unique, but
// yaml-cpp keeps every pair and nlohmann::json keeps the last, so `max_steps: 10` written twice
// would silently take the second value. Every dialect (braid's YAML, Accelerate's YAML,
// DeepSpeed's JSON) rejects them instead, naming the key path and both lines (both columns
// when a flow mapping holds both on one line):
//   run.yaml:9: duplicate key 'training.max_steps' at lines 4 and 9
//   run.yaml:1: duplicate key 'model.preset' twice on line 1 (columns 9 and 28)
#pragma once

#include <string>
#include <string_view>

namespace YAML {
class Node;
}

namespace braid::config {

// Throws for the first key (in document order, nested mappings and lists included) that a
// mapping of `root` holds twice with different values (the same value twice is accepted, as
// it means one thing); `source` names the file.
void reject_duplicate_keys(const YAML::Node& root, const std::string& source);

// The same for JSON text that has already parsed (so it is well-formed).
void reject_duplicate_json_keys(std::string_view json_text, const std::string& source);

}  // namespace braid::config
