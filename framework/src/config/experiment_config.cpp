#include <algorithm>
#include <cstdint>
#include <functional>
#include <optional>
#include <sstream>
#include <system_error>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <crucible/config.h>
#include <crucible/errors.h>

#include "config/determined.h"
#include "config/enum_names.h"
#include "config/paths.h"
#include "config/schema.h"
#include "config/yaml_reader.h"
#include "util/file_system.h"
#include "util/utf8.h"

namespace crucible {

std::string Length::str() const {
  return fmt::format("{} {}", value, config::names<LengthUnit>().name(unit));
}

int64_t ExperimentConfig::global_batch_size() const {
  return hyperparameters.at("global_batch_size").value.get<int64_t>();
}

nlohmann::json ExperimentConfig::constant_hyperparameters() const {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [name, spec] : hyperparameters) {
    if (spec.type != HyperparameterSpec::Type::kConst) {
      throw ConfigError(fmt::format(
          "{}: hyperparameters.{}: is a search space, but searcher '{}' runs one trial with "
          "constant hyperparameters; give it a constant value",
          source_path, name, searcher.name));
    }
    out[name] = spec.value;
  }
  return out;
}

namespace {

using config::MapReader;
using config::Source;

void apply_override(YAML::Node& root, const std::string& text, Source& source) {
  const auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0) {
    throw ConfigError(
        fmt::format("--set {}: expected KEY=VALUE, e.g. --set hyperparameters.lr=0.01", text));
  }
  const std::string key = text.substr(0, eq);
  if (const auto bad = util::first_invalid_utf8(text)) {
    throw ConfigError(fmt::format("--set {}...: not UTF-8 text (byte 0x{:02X} at offset {})",
                                  text.substr(0, *bad), static_cast<unsigned char>(text[*bad]),
                                  *bad));
  }
  YAML::Node value;
  try {
    value = YAML::Load(text.substr(eq + 1));
  } catch (const YAML::Exception& e) {
    throw ConfigError(fmt::format("--set {}: the value is not valid YAML: {}", text, e.msg));
  }
  std::vector<std::string> parts;
  std::stringstream ss(key);
  for (std::string part; std::getline(ss, part, '.');) {
    if (part.empty())
      throw ConfigError(fmt::format("--set {}: empty key segment in '{}'", text, key));
    parts.push_back(part);
  }
  // A length or period has exactly one unit: setting one unit replaces the other.
  if (parts.size() == 2) {
    const config::Key* length = config::find_key(parts[0]);
    if (length != nullptr && length->is_length) root[parts[0]] = YAML::Node(YAML::NodeType::Map);
  }
  YAML::Node node;
  node.reset(root);
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    YAML::Node child = node[parts[i]];
    if (!child.IsMap()) {
      if (child.IsDefined() && !child.IsNull()) {
        throw ConfigError(fmt::format("--set {}: '{}' is not a mapping, so it has no key '{}'",
                                      text, parts[i], parts[i + 1]));
      }
      node[parts[i]] = YAML::Node(YAML::NodeType::Map);
      child = node[parts[i]];
    }
    node.reset(child);
  }
  node[parts.back()] = value;
  source.add_override(key, text);
}

ExperimentConfig parse_root(const Source& source, const YAML::Node& root) {
  if (!root.IsDefined() || root.IsNull()) {
    throw ConfigError(source.file() + ": the experiment file is empty");
  }
  ExperimentConfig c;
  const MapReader top(source, root, "", config::top_level_names());
  // Every problem of the file in one error: each key is read even when an earlier one failed.
  std::vector<std::string> problems;
  auto attempt = [&](const std::function<void()>& read) {
    try {
      read();
    } catch (const ConfigError& e) {
      problems.emplace_back(e.what());
    }
  };
  std::optional<MapReader> section;
  std::string failed_section;
  for (const config::Key& key : config::schema()) {
    if (key.section.empty()) {
      attempt([&] {
        if (key.required && !top.has(key.name)) top.fail_missing(key.name, key.description);
        key.read(top, c);
      });
      continue;
    }
    if (!top.has(key.section) || key.section == failed_section) continue;
    if (!section || section->path() != key.section) {
      section.reset();
      attempt([&] {
        section.emplace(source, root[key.section], key.section, config::section_keys(key.section));
      });
      if (!section) {
        failed_section = key.section;
        continue;
      }
    }
    attempt([&] { key.read(*section, c); });
  }
  if (problems.size() == 1) throw ConfigError(problems.front());
  if (!problems.empty()) {
    std::string list;
    for (const auto& p : problems) list += "\n  " + p;
    throw ConfigError(fmt::format("{}: {} problems:{}", source.file(), problems.size(), list));
  }
  const SearcherConfig& s = c.searcher;
  if (s.max_time > 0 && s.time_metric.empty()) {
    source.fail("searcher.max_time", root["searcher"]["max_time"],
                "needs searcher.time_metric, the validation metric it counts (e.g. batches)");
  }
  if (!s.time_metric.empty() && !config::names<LengthUnit>().parse(s.time_metric)) {
    source.fail("searcher.time_metric", root["searcher"]["time_metric"],
                fmt::format("'{}': Crucible counts a trial's length in batches, records or epochs",
                            s.time_metric));
  }
  // The node at section.key, else the section, else the root: a missing key has no place.
  const auto at = [&](const char* section, const std::string& key) {
    const YAML::Node parent = root[section];
    if (!parent.IsDefined() || !parent.IsMap()) return YAML::Node(root);
    return parent[key].IsDefined() ? YAML::Node(parent[key]) : parent;
  };
  if ((s.name == "random" || s.name == "adaptive_asha") &&
      !(root["searcher"].IsDefined() && root["searcher"].IsMap() &&
        root["searcher"]["max_trials"].IsDefined())) {
    source.fail("searcher.max_trials", at("searcher", "max_trials"),
                fmt::format("required by searcher {}: how many trials to start", s.name));
  }
  if (!s.source_trial_id.empty() && !s.source_checkpoint_uuid.empty()) {
    source.fail("searcher.source_checkpoint_uuid", root["searcher"]["source_checkpoint_uuid"],
                "a warm start comes from one place: give source_trial_id or "
                "source_checkpoint_uuid, not both");
  }
  if (c.global_batch_size() % c.resources.slots_per_trial != 0) {
    source.fail("hyperparameters.global_batch_size", root["hyperparameters"]["global_batch_size"],
                fmt::format("{} is not divisible by resources.slots_per_trial ({})",
                            c.global_batch_size(), c.resources.slots_per_trial));
  }
  return c;
}

}  // namespace

ExperimentConfig parse_experiment_config(const std::string& yaml_text,
                                         const std::string& source_name,
                                         const std::vector<std::string>& overrides) {
  Source source(source_name);
  // YAML is UTF-8 text; other bytes would reach the run's JSON files, which cannot hold them.
  if (const auto bad = util::first_invalid_utf8(yaml_text)) {
    const size_t line_start = yaml_text.rfind('\n', *bad) + 1;  // 0 when on the first line
    const auto line = 1 + std::count(yaml_text.begin(), yaml_text.begin() + *bad, '\n');
    throw ConfigError(
        fmt::format("{}:{}:{}: not UTF-8 text (byte 0x{:02X}); save the file as UTF-8", source_name,
                    line, *bad - line_start + 1, static_cast<unsigned char>(yaml_text[*bad])));
  }
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    throw ConfigError(fmt::format("{}:{}:{}: invalid YAML: {}", source_name, e.mark.line + 1,
                                  e.mark.column + 1, e.msg));
  }
  if (!overrides.empty() && (!root.IsDefined() || root.IsNull())) {
    root = YAML::Node(YAML::NodeType::Map);
  }
  for (const auto& text : overrides) {
    if (!root.IsMap()) break;
    apply_override(root, text, source);
  }
  std::vector<std::string> warnings;
  config::adopt_determined_forms(root, source, warnings);
  ExperimentConfig c = parse_root(source, root);
  // Early stopping acts at validations. Without a validation period a single run, or a grid or
  // random search's trial, validates only at its end, where nothing is left to stop (adaptive
  // ASHA validates its trials at every rung).
  if (!c.early_stopping.metric.empty() && c.min_validation_period.value == 0 &&
      c.searcher.name != "adaptive_asha") {
    warnings.push_back(fmt::format(
        "{}: early_stopping has nothing to act on: with no min_validation_period the trial "
        "validates only at the end of training; set min_validation_period",
        source.where("early_stopping", root["early_stopping"])));
  }
  c.source_path = source_name;
  c.warnings = std::move(warnings);
  return c;
}

ExperimentConfig load_experiment_config(const std::string& path,
                                        const std::vector<std::string>& overrides) {
  std::string text;
  try {
    text = util::read_file(path);
  } catch (const std::system_error& e) {
    throw ConfigError(
        fmt::format("{}: cannot open the experiment file: {}", path, e.code().message()));
  }
  ExperimentConfig config = parse_experiment_config(text, path, overrides);
  config::make_paths_absolute(config);
  return config;
}

}  // namespace crucible
