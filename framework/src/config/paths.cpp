#include "config/paths.h"

#include "util/file_system.h"

namespace crucible::config {

std::string config_dir(const ExperimentConfig& config) {
  return util::parent_path(util::absolute(config.source_path));
}

std::string runs_dir(const ExperimentConfig& config) {
  const std::string& host = config.checkpoint_storage.host_path;
  const std::string base = util::is_absolute(host) ? host : util::join(config_dir(config), host);
  return util::join(util::canonical_or_absolute(base), config.name);
}

}  // namespace crucible::config
