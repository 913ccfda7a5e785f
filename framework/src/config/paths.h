#pragma once

// Where an experiment file's relative paths point.

#include <string>

#include <crucible/config.h>

namespace crucible::config {

// The absolute directory of the file `config` was read from (config.source_path). A relative path
// in an experiment file, from the file or from --set, is relative to it: a library path in
// `entrypoint` (then to the working directory, as load_trial documents) and
// checkpoint_storage.host_path.
std::string config_dir(const ExperimentConfig& config);

// Makes the config's paths absolute against config_dir(config) and normal
// (checkpoint_storage.host_path, and searcher.source_trial_id and source_checkpoint_uuid when
// set), so that the config a run records means the same from any working directory.
// Idempotent. load_experiment_config, Trainer and a search apply it.
void make_paths_absolute(ExperimentConfig& config);

// <host_path>/<name> as an absolute path: the folder a new run or experiment of `config` gets its
// directory in. A host_path still relative is relative to the working directory.
std::string runs_dir(const ExperimentConfig& config);

}  // namespace crucible::config
