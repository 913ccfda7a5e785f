#pragma once

#include <map>
#include <string>

#include <yaml-cpp/yaml.h>

#include <crucible/config.h>

#include "config/yaml_reader.h"

namespace crucible::config {

using Hyperparameters = std::map<std::string, HyperparameterSpec>;

// Reads the `hyperparameters` mapping of `top`, which must have the key (the schema marks it
// required): constants, or `{type: ...}` search spaces. Requires a positive integer constant
// `global_batch_size`; throws ConfigError naming the hyperparameter otherwise.
Hyperparameters read_hyperparameters(const MapReader& top);

// Writes `hyperparameters` so that read_hyperparameters gives them back.
void emit_hyperparameters(YAML::Emitter& out, const Hyperparameters& hyperparameters);

}  // namespace crucible::config
