// The known key a misspelt one most likely meant, for "unknown key ... (did you mean ...?)"
// errors of every config dialect (braid's YAML, DeepSpeed's JSON).
#pragma once

#include <string>
#include <vector>

namespace braid::config {

// Levenshtein distance between a and b (insert, delete, substitute, each cost 1).
size_t edit_distance(const std::string& a, const std::string& b);

// The key of `known` closest to `key` ("section.leaf" paths): the fewest edits of the last
// component, plus 2 when it sits in another section (a key put in the wrong section is still
// found, but a near miss inside the right section wins). "" when none is within a third of the
// longer name's length (+2).
std::string closest_key(const std::string& key, const std::vector<std::string>& known);

// " (did you mean 'x.y'?)", or "" when there is no close key.
std::string did_you_mean(const std::string& key, const std::vector<std::string>& known);

}  // namespace braid::config
