#pragma once

#include <string>

#include <crucible/config.h>

namespace crucible::train {

// A run directory: <host_path>/<name>/<run-id>/ holding config.yaml (the resolved config),
// trainer.log, metrics.jsonl and checkpoints/.
struct RunDir {
  std::string path;
  std::string config_file() const { return path + "/config.yaml"; }
  std::string log_file() const { return path + "/trainer.log"; }
  std::string metrics_file() const { return path + "/metrics.jsonl"; }
  std::string checkpoints() const;  // checkpoint::checkpoints_dir(path)
};

// A new run id: the UTC time and 16 random bits, "20261123-193509-1a2b".
std::string new_run_id();

// Creates a fresh run directory (`output_dir`, or a new <host_path>/<name>/<run-id>) and writes
// config.yaml into it. Throws UsageError when `output_dir` already holds a run, TrainingError
// when a path cannot be created.
RunDir create_run_dir(const ExperimentConfig& config, const std::string& output_dir);

// Opens an existing run directory for resuming; throws UsageError when it holds no run.
RunDir open_run_dir(const std::string& path);

}  // namespace crucible::train
