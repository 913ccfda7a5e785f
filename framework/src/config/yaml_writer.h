#pragma once

#include <string>

#include <yaml-cpp/yaml.h>
#include <nlohmann/json.hpp>

namespace crucible::config {

// Writes `s` as a YAML string that reads back as the same string: quoted when YAML would type
// it otherwise ("123", "true", "null").
void emit_string(YAML::Emitter& out, const std::string& s);

// Writes `value` as YAML that yaml_to_json reads back as an equal value; arrays in flow style.
void emit_json(YAML::Emitter& out, const nlohmann::json& value);

}  // namespace crucible::config
