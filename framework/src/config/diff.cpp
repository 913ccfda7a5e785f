#include "config/diff.h"

#include <map>

#include <yaml-cpp/yaml.h>

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
  for (const char* prefix :
       {"max_length", "min_validation_period", "min_checkpoint_period", "scheduling_unit",
        "checkpoint_storage.save_trial_best", "checkpoint_storage.save_trial_latest", "description",
        "resources.distributed_timeout_seconds", "optimizations.gradient_as_bucket_view"}) {
    const std::string p(prefix);
    if (key == p || key.rfind(p + ".", 0) == 0) return true;
  }
  return false;
}

}  // namespace crucible::config
