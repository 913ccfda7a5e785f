#include <algorithm>
#include <cstdint>
#include <functional>
#include <optional>
#include <sstream>
#include <system_error>

#include <c10/util/Exception.h>
#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <crucible/config.h>
#include <crucible/errors.h>

#include "config/determined.h"
#include "config/enum_names.h"
#include "config/paths.h"
#include "config/schema.h"
#include "config/suggest.h"
#include "config/yaml_reader.h"
#include "config/yaml_text.h"
#include "util/file_system.h"
#include "util/utf8.h"

namespace crucible {

std::string Length::str() const {
  if (value == 1) {
    switch (unit) {
      case LengthUnit::kBatches:
        return "1 batch";
      case LengthUnit::kEpochs:
        return "1 epoch";
      case LengthUnit::kRecords:
        return "1 record";
    }
  }
  return fmt::format("{} {}", value, config::names<LengthUnit>().name(unit));
}

std::vector<int64_t> mode_brackets(AshaMode mode, int64_t rungs) {
  TORCH_CHECK(rungs >= 1 && rungs <= kMostBracketRungs, "mode_brackets: ", rungs,
              " rungs; a bracket has 1 to ", kMostBracketRungs);
  const int64_t fewest = mode == AshaMode::kAggressive ? rungs
                         : mode == AshaMode::kStandard ? (rungs - 1) / 2 + 1
                                                       : 1;
  std::vector<int64_t> out;
  for (int64_t r = rungs; r >= fewest; --r) out.push_back(r);
  return out;
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
          config::key_place(*this, "hyperparameters." + name), name,
          config::names<SearcherName>().name(searcher.name)));
    }
    out[name] = spec.value;
  }
  return out;
}

namespace {

using config::MapReader;
using config::Source;

// Whether `target` occurs more than once in the tree `root` (an alias makes a node occur again).
// A tree too large to walk (aliases of aliases) counts as yes.
bool shared(const YAML::Node& root, const YAML::Node& target) {
  int found = 0;
  int64_t budget = 100000;  // nodes visited
  const std::function<void(const YAML::Node&)> walk = [&](const YAML::Node& node) {
    if (found > 1 || --budget < 0) return;
    if (node.is(target)) {
      ++found;
      return;
    }
    if (node.IsMap()) {
      for (const auto& item : node) walk(item.second);
    } else if (node.IsSequence()) {
      for (const auto& item : node) walk(item);
    }
  };
  walk(root);
  return found > 1 || budget < 0;
}

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
  const std::string given = text.substr(eq + 1);
  if (config::second_document_line(given)) {
    throw ConfigError(fmt::format(
        "--set {}: the value is not valid YAML: it holds a second document (after ---)", text));
  }
  if (given.find_first_not_of(" \t") == std::string::npos) {
    // An unset shell variable, most likely: YAML would read it as null, which an optional key
    // takes as its default.
    throw ConfigError(fmt::format(
        "--set {}: no value after '='; give one, or null to leave the key unset", text));
  }
  YAML::Node value;
  try {
    value = YAML::Load(given);
  } catch (const YAML::Exception& e) {
    throw ConfigError(fmt::format("--set {}: the value is not valid YAML: {}", text, e.msg));
  }
  if (config::unclosed_quote(value, given)) {
    throw ConfigError(fmt::format(
        "--set {}: the value is not valid YAML: a quote in it is never closed (to pass quotes, "
        "quote the whole option for the shell: --set '{}=\"...\"')",
        text, key));
  }
  std::vector<std::string> parts;
  std::stringstream ss(key);
  for (std::string part; std::getline(ss, part, '.');) {
    if (part.empty())
      throw ConfigError(fmt::format("--set {}: empty key segment in '{}'", text, key));
    parts.push_back(part);
  }
  // A length or period has exactly one unit: setting one unit replaces the other.
  std::string parent;
  for (size_t i = 0; i + 1 < parts.size(); ++i) parent += (i == 0 ? "" : ".") + parts[i];
  const config::Key* length = parent.empty() ? nullptr : config::find_key(parent);
  const bool sets_a_unit = length != nullptr && length->is_length;
  // yaml-cpp's assignment writes into the node itself, which an alias (*name) may share with
  // other keys: a mapping on the way that occurs more than once is replaced by a copy of its own
  // (the others keep their place in the file for messages), and the key itself is removed and
  // added again.
  YAML::Node node;
  node.reset(root);
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    const YAML::Node child = node[parts[i]];
    if (child.IsDefined() && !child.IsNull() && !child.IsMap()) {
      throw ConfigError(fmt::format("--set {}: '{}' is not a mapping, so it has no key '{}'", text,
                                    parts[i], parts[i + 1]));
    }
    const bool replaced = sets_a_unit && i + 2 == parts.size();
    if (!child.IsMap() || replaced || shared(root, child)) {
      YAML::Node own(YAML::NodeType::Map);
      if (child.IsMap() && !replaced) {
        for (const auto& entry : child) own.force_insert(entry.first, entry.second);
      }
      node.remove(parts[i]);
      node[parts[i]] = own;
      node.reset(own);
    } else {
      node.reset(child);
    }
  }
  node.remove(parts.back());
  node[parts.back()] = value;
  source.add_override(text);
}

ExperimentConfig parse_root(const Source& source, const YAML::Node& root) {
  if (!root.IsDefined() || root.IsNull()) {
    throw ConfigError(source.file() + ": the experiment file is empty");
  }
  ExperimentConfig c;
  // Every problem of the file in one error: each key is read even when an earlier one failed, or
  // when its mapping holds an unknown key.
  std::vector<std::string> problems;
  const MapReader top(source, root, "", config::top_level_names(), &problems);
  auto attempt = [&](const std::function<void()>& read) {
    try {
      read();
    } catch (const ConfigError& e) {
      problems.emplace_back(e.what());
    }
  };
  // A required key that is missing because it is misspelt: its unknown key's error says so.
  const std::vector<std::string> known = config::top_level_names();
  const auto misspelt = [&](const std::string& name) {
    for (const auto& kv : root) {
      const std::string written = kv.first.Scalar();
      if (std::find(known.begin(), known.end(), written) == known.end() &&
          !config::did_you_mean(written, {name}).empty()) {
        return true;
      }
    }
    return false;
  };
  std::optional<MapReader> section;
  std::string failed_section;
  for (const config::Key& key : config::schema()) {
    if (key.section.empty()) {
      attempt([&] {
        if (key.required && !top.has(key.name)) {
          if (misspelt(key.name)) return;
          top.fail_missing(key.name, key.description);
        }
        key.read(top, c);
      });
      continue;
    }
    if (!top.has(key.section) || key.section == failed_section) continue;
    if (!section || section->path() != key.section) {
      section.reset();
      attempt([&] {
        section.emplace(source, root[key.section], key.section, config::section_keys(key.section),
                        &problems);
      });
      if (!section) {
        failed_section = key.section;
        continue;
      }
    }
    attempt([&] { key.read(*section, c); });
  }
  // Read or left at its default: a searcher key that failed adds nothing here.
  const SearcherConfig& s = c.searcher;
  const auto time_unit = config::names<LengthUnit>().parse(s.time_metric);
  attempt([&] {
    if (s.max_time > 0 && s.time_metric.empty()) {
      source.fail("searcher.max_time", root["searcher"]["max_time"],
                  "needs searcher.time_metric, the validation metric it counts (e.g. batches)");
    }
  });
  attempt([&] {
    if (!s.time_metric.empty() && !time_unit) {
      source.fail(
          "searcher.time_metric", root["searcher"]["time_metric"],
          fmt::format("'{}': Crucible counts a trial's length in batches, records or epochs",
                      s.time_metric));
    }
  });
  // Adaptive ASHA trains its trials to max_time: given beside a max_length (the file's, one from
  // --set, or searcher.max_length), the two must agree. (Another searcher reads max_time only
  // as the length when no max_length is given: a run's own --set max_length replaces it.)
  attempt([&] {
    if (s.name != SearcherName::kAdaptiveAsha || s.max_time <= 0 || !time_unit ||
        c.max_length.value == 0) {
      return;
    }
    const Length max_time{*time_unit, s.max_time};
    if (!(max_time == c.max_length)) {
      source.fail("searcher.max_time", root["searcher"]["max_time"],
                  fmt::format("{} disagrees with max_length ({}); give one length, in "
                              "max_length or in searcher.max_time",
                              max_time.str(), c.max_length.str()));
    }
  });
  if (problems.size() == 1) throw ConfigError(problems.front());
  if (!problems.empty()) {
    std::string list;
    for (const auto& p : problems) list += "\n  " + p;
    throw ConfigError(fmt::format("{}: {} problems:{}", source.file(), problems.size(), list));
  }
  // The node at section.key, else the section, else the root: a missing key has no place.
  const auto at = [&](const char* section, const std::string& key) {
    const YAML::Node parent = root[section];
    if (!parent.IsDefined() || !parent.IsMap()) return YAML::Node(root);
    return parent[key].IsDefined() ? YAML::Node(parent[key]) : parent;
  };
  // Whether the file (or a --set) gives searcher.<key> a value.
  const auto given = [&](const std::string& key) {
    const YAML::Node searcher = root["searcher"];
    return searcher.IsMap() && searcher[key].IsDefined() && !searcher[key].IsNull();
  };
  if ((s.name == SearcherName::kRandom || s.name == SearcherName::kAdaptiveAsha) &&
      !given("max_trials")) {
    source.fail("searcher.max_trials", at("searcher", "max_trials"),
                fmt::format("required by searcher {}: how many trials to start",
                            config::names<SearcherName>().name(s.name)));
  }
  // A search ranks its trials by searcher.metric: as in Determined, it names it.
  if (s.name != SearcherName::kSingle && !given("metric")) {
    source.fail("searcher.metric", at("searcher", "metric"),
                fmt::format("required by searcher {}: the validation metric that ranks its "
                            "trials (e.g. validation_loss)",
                            config::names<SearcherName>().name(s.name)));
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
  // YAML is UTF-8 text; other bytes would reach the run's JSON files, which cannot hold them. A
  // NUL is UTF-8 but no YAML character: yaml-cpp misreads what follows it.
  const size_t nul = yaml_text.find('\0');
  const auto bad = util::first_invalid_utf8(yaml_text);
  if (bad || nul != std::string::npos) {
    const size_t at = bad ? std::min(*bad, nul) : nul;
    const size_t line_start = at == 0 ? 0 : yaml_text.rfind('\n', at - 1) + 1;  // npos + 1 == 0
    const auto line = 1 + std::count(yaml_text.begin(), yaml_text.begin() + at, '\n');
    const std::string what =
        yaml_text[at] == '\0'
            ? std::string("a NUL byte (0x00), which YAML text cannot hold; remove it")
            : fmt::format("not UTF-8 text (byte 0x{:02X}); save the file as UTF-8",
                          static_cast<unsigned char>(yaml_text[at]));
    throw ConfigError(fmt::format("{}:{}:{}: {}", source_name, line, at - line_start + 1, what));
  }
  YAML::Node root;
  try {
    if (const auto line = config::second_document_line(yaml_text)) {
      throw ConfigError(
          fmt::format("{}:{}:1: a second YAML document (after ---); an experiment file holds one",
                      source_name, *line));
    }
    root = YAML::Load(yaml_text);
    if (const auto quote = config::unclosed_quote(root, yaml_text)) {
      throw ConfigError(fmt::format(
          "{}:{}:{}: invalid YAML: this quote is never closed, so the value runs to the end of "
          "the file and takes in every line after it; close it",
          source_name, quote->line + 1, quote->column + 1));
    }
  } catch (const YAML::Exception& e) {
    const auto tab = config::tab_indented_line(yaml_text, e.mark.line + 1);
    throw ConfigError(fmt::format(
        "{}:{}:{}: invalid YAML: {}{}", source_name, e.mark.line + 1, e.mark.column + 1, e.msg,
        tab ? fmt::format("; line {} is indented with a tab, which YAML does not allow: indent "
                          "with spaces",
                          *tab)
            : ""));
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
  // Determined's searcher.max_length is what a search trains to; max_length what a trial's fit
  // does. Given both (a file's one and the other from --set), they must agree.
  if (c.searcher.max_length.value > 0 && !(c.searcher.max_length == c.max_length)) {
    source.fail("max_length", root["max_length"],
                fmt::format("{} disagrees with searcher.max_length ({}); give one length, in "
                            "max_length or in searcher.max_length",
                            c.max_length.str(), c.searcher.max_length.str()));
  }
  // Early stopping acts at validations. Without a validation period a single run, or a grid or
  // random search's trial, validates only at its end, where nothing is left to stop (adaptive
  // ASHA validates its trials at every rung).
  if (!c.early_stopping.metric.empty() && c.min_validation_period.value == 0 &&
      c.searcher.name != SearcherName::kAdaptiveAsha) {
    warnings.push_back(fmt::format(
        "{}: early_stopping has nothing to act on: with no min_validation_period the trial "
        "validates only at the end of training; set min_validation_period",
        source.where("early_stopping", root["early_stopping"])));
  }
  // A searcher key the searcher does not read (max_trials with grid) would be silently ignored.
  const YAML::Node searcher = root["searcher"];
  for (const config::Key& key : config::schema()) {
    // A default (which earlier versions wrote into every config.yaml) changes nothing.
    if (key.searchers.empty() || !searcher.IsMap() || !searcher[key.name].IsDefined() ||
        searcher[key.name].IsNull() ||
        std::find(key.searchers.begin(), key.searchers.end(), c.searcher.name) !=
            key.searchers.end() ||
        !config::differs_from_default(key, c)) {
      continue;
    }
    std::string readers;
    for (size_t i = 0; i < key.searchers.size(); ++i) {
      readers += fmt::format("{}{}",
                             i == 0                          ? ""
                             : i + 1 == key.searchers.size() ? " and "
                                                             : ", ",
                             config::names<SearcherName>().name(key.searchers[i]));
    }
    warnings.push_back(fmt::format(
        "{}: {} has no effect with searcher {}{}: only {} read{} it",
        source.where(key.path(), searcher[key.name]), key.path(),
        config::names<SearcherName>().name(c.searcher.name),
        c.searcher.name == SearcherName::kGrid ? " (a grid runs one trial per point)" : "", readers,
        key.searchers.size() == 1 ? "s" : ""));
  }
  // Only a random or adaptive_asha search draws a seed (search::run_search): any other run
  // without one uses 0, which its resolved config spells out as earlier versions did.
  if (!c.reproducibility.experiment_seed && c.searcher.name != SearcherName::kRandom &&
      c.searcher.name != SearcherName::kAdaptiveAsha) {
    c.reproducibility.experiment_seed = 0;
  }
  c.source_path = source_name;
  c.overrides = source.overrides();
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
