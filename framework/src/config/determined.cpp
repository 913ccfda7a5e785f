#include "config/determined.h"

#include <fmt/format.h>

#include "config/enum_names.h"
#include "util/file_system.h"

namespace crucible::config {
namespace {

// Removes `section`.`key` (or top-level `key` when section is empty) with a warning.
void ignore(YAML::Node& root, const std::string& section, const std::string& key,
            const Source& source, std::vector<std::string>& warnings) {
  YAML::Node parent = section.empty() ? root : root[section];
  if (!parent.IsMap() || !parent[key].IsDefined()) return;
  const std::string path = section.empty() ? key : section + "." + key;
  warnings.push_back(fmt::format("{}: {} is ignored: it only acts on a Determined cluster",
                                 source.where(path, parent[key]), path));
  parent.remove(key);
}

// checkpoint_storage.`key`, which must be a path.
std::string path_of(const YAML::Node& storage, const std::string& key, const Source& source) {
  const YAML::Node node = storage[key];
  if (!node.IsScalar()) {
    source.fail("checkpoint_storage." + key, node, "expected a path (a string)");
  }
  return node.Scalar();
}

}  // namespace

void adopt_determined_forms(YAML::Node& root, const Source& source,
                            std::vector<std::string>& warnings) {
  if (!root.IsMap()) return;
  for (const char* key :
       {"labels", "environment", "bind_mounts", "workspace", "project", "debug", "max_slots"}) {
    ignore(root, "", key, source, warnings);
  }
  for (const char* key : {"resource_pool", "max_slots", "priority"}) {
    ignore(root, "resources", key, source, warnings);
  }
  YAML::Node storage = root["checkpoint_storage"];
  if (storage.IsMap() && (storage["type"].IsDefined() || storage["storage_path"].IsDefined())) {
    const YAML::Node type = storage["type"];
    if (type.IsDefined() && !(type.IsScalar() && type.Scalar() == "shared_fs")) {
      source.fail("checkpoint_storage.type", type,
                  "Crucible keeps checkpoints on a file system: only shared_fs is accepted (its "
                  "host_path and storage_path)");
    }
    const YAML::Node where = type.IsDefined() ? type : storage["storage_path"];
    const std::string place = source.where("checkpoint_storage", where);
    if (storage["storage_path"].IsDefined()) {
      const std::string sub = path_of(storage, "storage_path", source);
      storage["host_path"] = storage["host_path"].IsDefined()
                                 ? util::join(path_of(storage, "host_path", source), sub)
                                 : sub;
      storage.remove("storage_path");
    }
    storage.remove("type");
    warnings.push_back(fmt::format(
        "{}: checkpoint_storage.type shared_fs is how Crucible stores checkpoints; runs go under "
        "host_path {}",
        place,
        storage["host_path"].IsScalar() && !storage["host_path"].IsNull()
            ? storage["host_path"].Scalar()
            : "runs"));
  }
  const YAML::Node searcher = root["searcher"];
  // A null is no value: `max_length: null`, or `--set searcher.max_length=null`, leaves the other
  // form to give the length.
  const auto given = [](const YAML::Node& node) { return node.IsDefined() && !node.IsNull(); };
  if (given(root["max_length"]) || !searcher.IsMap()) return;
  // Adopted only when valid (a unit's name and a positive count): an invalid or zero ("unset")
  // one is named by its own key's error, not again under max_length at no place in the file.
  const auto count = [](const YAML::Node& node) {
    return node.IsDefined() && node.IsScalar() && classify_scalar(node) == ScalarType::kInt &&
           node.as<int64_t>(0) > 0;
  };
  const auto unit = [](const YAML::Node& node) {
    return node.IsDefined() && node.IsScalar() && names<LengthUnit>().parse(node.Scalar());
  };
  const YAML::Node older = searcher["max_length"];
  if (given(older)) {
    if (older.IsMap() && older.size() == 1 && unit(older.begin()->first) &&
        count(older.begin()->second)) {
      root["max_length"] = YAML::Clone(older);
    }
  } else if (count(searcher["max_time"]) && unit(searcher["time_metric"])) {
    YAML::Node length(YAML::NodeType::Map);
    length[searcher["time_metric"].Scalar()] = YAML::Clone(searcher["max_time"]);
    root["max_length"] = length;
  }
}

}  // namespace crucible::config
