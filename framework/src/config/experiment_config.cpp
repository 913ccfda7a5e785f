#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <crucible/config.h>
#include <crucible/errors.h>

#include "config/yaml_reader.h"

namespace crucible {

std::string Length::str() const {
  const char* name = unit == LengthUnit::kBatches  ? "batches"
                     : unit == LengthUnit::kEpochs ? "epochs"
                                                   : "records";
  return fmt::format("{} {}", value, name);
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

HyperparameterSpec parse_hyperparameter(const Source& source, const YAML::Node& node,
                                        const std::string& path) {
  HyperparameterSpec spec;
  if (!node.IsMap() || !node["type"].IsDefined()) {
    spec.value = config::yaml_to_json(node);
    return spec;
  }
  const std::string type =
      MapReader(source, node, path, {"type", "val", "minval", "maxval", "base", "count", "vals"})
          .choice("type", "", {"const", "int", "double", "log", "categorical"});
  auto allowed = [&](std::vector<std::string> keys) {
    keys.push_back("type");
    return MapReader(source, node, path, keys);
  };
  if (type == "const") {
    MapReader r = allowed({"val"});
    if (!r.has("val")) r.fail_missing("val");
    spec.value = config::yaml_to_json(node["val"]);
  } else if (type == "categorical") {
    spec.type = HyperparameterSpec::Type::kCategorical;
    MapReader r = allowed({"vals"});
    if (!r.has("vals")) r.fail_missing("vals");
    if (!node["vals"].IsSequence() || node["vals"].size() == 0) {
      r.fail("vals", "expected a non-empty list of values");
    }
    for (const auto& v : node["vals"]) spec.vals.push_back(config::yaml_to_json(v));
  } else {
    const bool is_int = type == "int";
    const bool is_log = type == "log";
    spec.type = is_int   ? HyperparameterSpec::Type::kInt
                : is_log ? HyperparameterSpec::Type::kLog
                         : HyperparameterSpec::Type::kDouble;
    MapReader r = is_log ? allowed({"minval", "maxval", "base", "count"})
                         : allowed({"minval", "maxval", "count"});
    auto bound = [&](const char* key) -> double {
      if (!r.has(key)) r.fail_missing(key);
      return is_int ? static_cast<double>(r.integer(key, 0, INT64_MIN)) : r.number(key, 0);
    };
    spec.minval = bound("minval");
    spec.maxval = bound("maxval");
    if (spec.minval > spec.maxval) {
      r.fail("maxval", fmt::format("maxval ({}) is below minval ({})", spec.maxval, spec.minval));
    }
    spec.base = r.number("base", 10);
    if (is_log && spec.base <= 1) r.fail("base", "a log base must be greater than 1");
    spec.count = r.integer("count", 0, 1);
  }
  return spec;
}

void apply_override(YAML::Node& root, const std::string& text, Source& source) {
  const auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0) {
    throw ConfigError(
        fmt::format("--set {}: expected KEY=VALUE, e.g. --set hyperparameters.lr=0.01", text));
  }
  const std::string key = text.substr(0, eq);
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
  static const std::vector<std::string> lengths = {"max_length", "min_validation_period",
                                                   "min_checkpoint_period"};
  if (parts.size() == 2 && std::find(lengths.begin(), lengths.end(), parts[0]) != lengths.end()) {
    root[parts[0]] = YAML::Node(YAML::NodeType::Map);
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
  ExperimentConfig c;
  if (!root.IsDefined() || root.IsNull()) {
    throw ConfigError(source.file() + ": the experiment file is empty");
  }
  MapReader top(source, root, "",
                {"name", "description", "entrypoint", "hyperparameters", "searcher", "max_length",
                 "records_per_epoch", "min_validation_period", "min_checkpoint_period",
                 "perform_initial_validation", "checkpoint_policy", "checkpoint_storage",
                 "resources", "optimizations", "reproducibility", "scheduling_unit", "data"});
  c.name = top.required_string("name");
  c.description = top.string("description", "");
  c.entrypoint = top.required_string("entrypoint");
  const auto colon = c.entrypoint.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == c.entrypoint.size()) {
    top.fail("entrypoint",
             "expected '<library>:<TrialClass>', e.g. 'fashion_mnist:FashionCNN', "
             "got '" +
                 c.entrypoint + "'");
  }

  if (!top.has("hyperparameters")) top.fail_missing("hyperparameters");
  const YAML::Node hp = root["hyperparameters"];
  if (!hp.IsMap()) top.fail("hyperparameters", "expected a mapping of name: value");
  MapReader(source, hp, "hyperparameters", [&] {
    std::vector<std::string> names;  // any name is valid; the reader still rejects duplicates
    for (const auto& kv : hp) names.push_back(kv.first.Scalar());
    return names;
  }());
  for (const auto& kv : hp) {
    const std::string name = kv.first.Scalar();
    c.hyperparameters[name] = parse_hyperparameter(source, kv.second, "hyperparameters." + name);
  }
  auto gbs = c.hyperparameters.find("global_batch_size");
  if (gbs == c.hyperparameters.end()) {
    source.fail("hyperparameters.global_batch_size", hp,
                "required hyperparameter 'global_batch_size' is missing");
  }
  if (gbs->second.type != HyperparameterSpec::Type::kConst ||
      !gbs->second.value.is_number_integer() || gbs->second.value.get<int64_t>() <= 0) {
    source.fail("hyperparameters.global_batch_size", hp["global_batch_size"],
                "must be a positive integer constant, got " + gbs->second.value.dump());
  }

  if (top.has("searcher")) {
    MapReader s(source, root["searcher"], "searcher",
                {"name", "metric", "smaller_is_better", "max_trials"});
    c.searcher.name = s.choice("name", "single", {"single", "grid", "random", "adaptive_asha"});
    c.searcher.metric = s.string("metric", c.searcher.metric);
    c.searcher.smaller_is_better = s.boolean("smaller_is_better", true);
    c.searcher.max_trials = s.integer("max_trials", 1, 1);
  }

  if (!top.has("max_length")) top.fail_missing("max_length");
  c.max_length = top.length("max_length", {}, 1);
  c.records_per_epoch = top.integer("records_per_epoch", 0, 0);
  c.min_validation_period = top.length("min_validation_period", {}, 0);
  c.min_checkpoint_period = top.length("min_checkpoint_period", {}, 0);
  c.perform_initial_validation = top.boolean("perform_initial_validation", false);
  const std::string policy = top.choice("checkpoint_policy", "best", {"best", "all", "none"});
  c.checkpoint_policy = policy == "best"  ? CheckpointPolicy::kBest
                        : policy == "all" ? CheckpointPolicy::kAll
                                          : CheckpointPolicy::kNone;
  if (top.has("checkpoint_storage")) {
    MapReader s(source, root["checkpoint_storage"], "checkpoint_storage",
                {"host_path", "save_trial_best", "save_trial_latest"});
    c.checkpoint_storage.host_path = s.string("host_path", c.checkpoint_storage.host_path);
    if (c.checkpoint_storage.host_path.empty()) s.fail("host_path", "must not be empty");
    c.checkpoint_storage.save_trial_best = s.integer("save_trial_best", 1, 0);
    c.checkpoint_storage.save_trial_latest = s.integer("save_trial_latest", 1, 0);
  }
  if (top.has("resources")) {
    MapReader s(source, root["resources"], "resources",
                {"slots_per_trial", "distributed_timeout_seconds", "distributed_backend"});
    c.resources.slots_per_trial = s.integer("slots_per_trial", 1, 1);
    c.resources.distributed_timeout_seconds = s.number("distributed_timeout_seconds", 300);
    const std::string backend = s.choice("distributed_backend", "auto", {"auto", "gloo", "nccl"});
    c.resources.distributed_backend = backend == "gloo"   ? DistributedBackend::kGloo
                                      : backend == "nccl" ? DistributedBackend::kNccl
                                                          : DistributedBackend::kAuto;
    if (!(c.resources.distributed_timeout_seconds > 0)) {
      s.fail("distributed_timeout_seconds", fmt::format("must be a number of seconds > 0, got {}",
                                                        c.resources.distributed_timeout_seconds));
    }
  }
  if (top.has("optimizations")) {
    MapReader s(source, root["optimizations"], "optimizations",
                {"aggregation_frequency", "average_aggregated_gradients", "gradient_bucket_mb",
                 "gradient_as_bucket_view"});
    c.optimizations.aggregation_frequency = s.integer("aggregation_frequency", 1, 1);
    c.optimizations.average_aggregated_gradients = s.boolean("average_aggregated_gradients", true);
    c.optimizations.gradient_bucket_mb = s.number("gradient_bucket_mb", 25);
    if (!(c.optimizations.gradient_bucket_mb > 0)) {
      s.fail("gradient_bucket_mb", fmt::format("must be a number of MiB > 0, got {}",
                                               c.optimizations.gradient_bucket_mb));
    }
    c.optimizations.gradient_as_bucket_view = s.boolean("gradient_as_bucket_view", true);
  }
  if (top.has("reproducibility")) {
    MapReader s(source, root["reproducibility"], "reproducibility", {"experiment_seed"});
    c.reproducibility.experiment_seed = static_cast<uint64_t>(s.integer("experiment_seed", 0, 0));
  }
  c.scheduling_unit = top.integer("scheduling_unit", 100, 1);
  if (top.has("data")) {
    if (!root["data"].IsMap()) top.fail("data", "expected a mapping");
    c.data = config::yaml_to_json(root["data"]);
  }
  if (c.global_batch_size() % c.resources.slots_per_trial != 0) {
    source.fail("hyperparameters.global_batch_size", hp["global_batch_size"],
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
  ExperimentConfig c = parse_root(source, root);
  c.source_path = source_name;
  return c;
}

ExperimentConfig load_experiment_config(const std::string& path,
                                        const std::vector<std::string>& overrides) {
  std::ifstream in(path);
  if (!in) {
    throw ConfigError(
        fmt::format("{}: cannot open the experiment file: {}", path, std::strerror(errno)));
  }
  std::stringstream text;
  text << in.rdbuf();
  return parse_experiment_config(text.str(), path, overrides);
}

}  // namespace crucible
