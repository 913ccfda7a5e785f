#pragma once

#include <string>
#include <vector>

namespace crucible::config {

// Edit distance (insert, delete, substitute, transpose adjacent) between a and b.
size_t edit_distance(const std::string& a, const std::string& b);

// The candidate nearest to `word`, or "" when none is near enough to be a likely typo.
std::string nearest(const std::string& word, const std::vector<std::string>& candidates);

// " (did you mean 'x'?)" for the nearest candidate, or "" when none is near.
std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace crucible::config
