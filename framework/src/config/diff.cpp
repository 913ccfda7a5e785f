#include "config/diff.h"

#include <map>
#include <set>

#include <fmt/format.h>
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

bool is_safe_search_change(const std::string& key) {
  const Key* described = find_key(key);
  return described != nullptr && described->safe_on_search_resume;
}

std::string change_text(const Change& change) {
  return fmt::format("{}: {} -> {}", change.key, change.before, change.after);
}

std::string change_list(const std::vector<Change>& changes,
                        const std::function<bool(const std::string& key)>& safe) {
  std::string list;
  for (const auto& c : changes) list += "\n  " + change_text(c) + (safe(c.key) ? "" : "  (unsafe)");
  return list;
}

std::vector<std::string> overrides_for(const std::vector<Change>& changes,
                                       const ExperimentConfig& after,
                                       const std::function<bool(const std::string& key)>& pick) {
  const YAML::Node resolved = YAML::Load(to_yaml(after));
  std::set<std::string> done;
  std::vector<std::string> out;
  for (const auto& c : changes) {
    const Key* key = find_key(c.key);
    if (key == nullptr || !pick(c.key) || !done.insert(key->path()).second) continue;
    const YAML::Node section = key->section.empty() ? resolved : resolved[key->section];
    const YAML::Node node =
        section.IsDefined() && section.IsMap() ? section[key->name] : YAML::Node();
    YAML::Emitter value;
    value << YAML::Flow << node;
    out.push_back(key->path() + "=" +
                  (node.IsDefined() && !node.IsNull() ? value.c_str() : "null"));
  }
  return out;
}

}  // namespace crucible::config
