#include "config/paths.h"

#include "util/file_system.h"

namespace crucible::config {

std::string config_dir(const ExperimentConfig& config) {
  return util::parent_path(util::absolute(config.source_path));
}

void make_paths_absolute(ExperimentConfig& config) {
  const std::string dir = config_dir(config);
  for (std::string* path : {&config.checkpoint_storage.host_path, &config.searcher.source_trial_id,
                            &config.searcher.source_checkpoint_uuid}) {
    if (!path->empty()) *path = util::lexically_normal(util::join(dir, *path));
  }
}

std::string runs_dir(const ExperimentConfig& config) {
  return util::join(util::absolute(config.checkpoint_storage.host_path), config.name);
}

}  // namespace crucible::config
