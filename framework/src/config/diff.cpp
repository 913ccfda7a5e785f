#include "config/diff.h"

#include <map>

#include <yaml-cpp/yaml.h>

#include "config/schema.h"

namespace crucible::config {

namespace {

void flatten(const YAML::Node& node, const std::string& prefix,
             std::map<std::string, std::string>& out) {
  if (node.IsMap()) {
    for (const auto& kv : node) {
      const std::string key = kv.first.Scalar();
      flatten(kv.second, prefix.empty() ? key : prefix + "." + key, out);
    }
    return;
  }
  YAML::Emitter e;
  e << YAML::Flow << node;
  out[prefix] = e.c_str();
}

std::map<std::string, std::string> flat(const ExperimentConfig& c) {
  std::map<std::string, std::string> out;
  flatten(YAML::Load(to_yaml(c)), "", out);
  return out;
}

}  // namespace

std::vector<Change> diff(const ExperimentConfig& before, const ExperimentConfig& after) {
  const auto a = flat(before), b = flat(after);
  std::map<std::string, Change> changes;
  for (const auto& [key, value] : a) {
    auto it = b.find(key);
    const std::string other = it == b.end() ? "(absent)" : it->second;
    if (other != value) changes[key] = {key, value, other};
  }
  for (const auto& [key, value] : b) {
    if (!a.count(key)) changes[key] = {key, "(absent)", value};
  }
  std::vector<Change> out;
  for (auto& [key, change] : changes) out.push_back(change);
  return out;
}

bool is_safe_change(const std::string& key) {
  const Key* described = find_key(key);
  return described != nullptr && described->safe_on_resume;
}

}  // namespace crucible::config
