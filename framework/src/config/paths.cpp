#include "config/paths.h"

#include "util/file_system.h"

namespace crucible::config {

std::string config_dir(const ExperimentConfig& config) {
  return util::parent_path(util::absolute(config.source_path));
}

void make_host_path_absolute(ExperimentConfig& config) {
  std::string& host = config.checkpoint_storage.host_path;
  host = util::lexically_normal(util::join(config_dir(config), host));
}

std::string runs_dir(const ExperimentConfig& config) {
  return util::join(util::absolute(config.checkpoint_storage.host_path), config.name);
}

}  // namespace crucible::config
