#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include <crucible/config.h>

#include "config/schema.h"

namespace crucible {

std::string to_yaml(const ExperimentConfig& c) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  const std::string* open_section = nullptr;
  for (const config::Key& key : config::schema()) {
    if (open_section != nullptr && *open_section != key.section) {
      out << YAML::EndMap;
      open_section = nullptr;
    }
    if (!key.section.empty() && open_section == nullptr) {
      out << YAML::Key << key.section << YAML::Value << YAML::Flow << YAML::BeginMap;
      open_section = &key.section;
    }
    if (!key.present(c)) continue;
    out << YAML::Key << key.name << YAML::Value;
    key.emit(out, c);
  }
  if (open_section != nullptr) out << YAML::EndMap;
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

std::vector<ConfigKey> config_keys() {
  const ExperimentConfig defaults;
  std::vector<ConfigKey> out;
  for (const config::Key& key : config::schema()) {
    ConfigKey described;
    described.path = key.path();
    described.required = key.required;
    described.safe_on_resume = key.safe_on_resume;
    described.safe_on_search_resume = key.safe_on_search_resume;
    described.description = key.description;
    if (!key.required) {
      YAML::Emitter value;
      key.emit(value, defaults);
      described.default_value = value.c_str();
    }
    out.push_back(std::move(described));
  }
  return out;
}

}  // namespace crucible
