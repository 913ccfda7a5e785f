#pragma once

#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "config/yaml_reader.h"

namespace crucible::config {

// Rewrites the parts of a Determined experiment file that Crucible reads differently, before the
// schema reads `root`:
//   - the keys that only act on a Determined cluster (labels, environment, bind_mounts,
//     workspace, project, debug, max_slots, resources.resource_pool,
//     resources.max_slots, resources.priority) are removed, each with one line in `warnings`
//     naming its place and saying it is ignored;
//   - checkpoint_storage.type must be shared_fs (anything else is a ConfigError) and is
//     removed; checkpoint_storage.storage_path is joined onto host_path (or becomes it); one
//     warning line says so;
//   - a searcher.max_length without a top-level max_length (Determined's older form) becomes
//     the top-level max_length too; so does searcher.max_time in units of searcher.time_metric
//     (the current form) when time_metric is batches, records or epochs. A null max_length,
//     top-level or the searcher's, counts as absent; one whose count is no positive integer is
//     not adopted (its own key names the fault).
void adopt_determined_forms(YAML::Node& root, const Source& source,
                            std::vector<std::string>& warnings);

}  // namespace crucible::config
