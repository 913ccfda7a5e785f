#include <cmath>

#include <yaml-cpp/yaml.h>

#include <crucible/config.h>

#include "config/yaml_reader.h"

namespace crucible {
namespace {

void emit_string(YAML::Emitter& out, const std::string& s) {
  if (config::classify_scalar(s, false) != config::ScalarType::kString) {
    out << YAML::DoubleQuoted << s;
  } else {
    out << s;
  }
}

void emit_json(YAML::Emitter& out, const nlohmann::json& v) {
  if (v.is_null()) {
    out << YAML::Null;
  } else if (v.is_boolean()) {
    out << (v.get<bool>() ? "true" : "false");
  } else if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isnan(d)) {
      out << ".nan";
    } else if (std::isinf(d)) {
      out << (d > 0 ? ".inf" : "-.inf");
    } else {
      out << v.dump();
    }
  } else if (v.is_number()) {
    out << v.dump();
  } else if (v.is_string()) {
    emit_string(out, v.get<std::string>());
  } else if (v.is_array()) {
    out << YAML::Flow << YAML::BeginSeq;
    for (const auto& item : v) emit_json(out, item);
    out << YAML::EndSeq;
  } else {
    out << YAML::BeginMap;
    for (const auto& [key, item] : v.items()) {
      out << YAML::Key << key << YAML::Value;
      emit_json(out, item);
    }
    out << YAML::EndMap;
  }
}

void emit_length(YAML::Emitter& out, const char* key, const Length& length) {
  const char* unit = length.unit == LengthUnit::kBatches  ? "batches"
                     : length.unit == LengthUnit::kEpochs ? "epochs"
                                                          : "records";
  out << YAML::Key << key << YAML::Value << YAML::Flow << YAML::BeginMap << YAML::Key << unit
      << YAML::Value << length.value << YAML::EndMap;
}

void emit_hyperparameter(YAML::Emitter& out, const HyperparameterSpec& spec) {
  using Type = HyperparameterSpec::Type;
  if (spec.type == Type::kConst) {
    if (spec.value.is_object() && spec.value.contains("type")) {
      out << YAML::BeginMap << YAML::Key << "type" << YAML::Value << "const" << YAML::Key << "val"
          << YAML::Value;
      emit_json(out, spec.value);
      out << YAML::EndMap;
    } else {
      emit_json(out, spec.value);
    }
    return;
  }
  out << YAML::Flow << YAML::BeginMap << YAML::Key << "type" << YAML::Value;
  if (spec.type == Type::kCategorical) {
    out << "categorical" << YAML::Key << "vals" << YAML::Value;
    emit_json(out, nlohmann::json(spec.vals));
  } else {
    out << (spec.type == Type::kInt ? "int" : spec.type == Type::kLog ? "log" : "double");
    const bool is_int = spec.type == Type::kInt;
    out << YAML::Key << "minval" << YAML::Value;
    emit_json(out, is_int ? nlohmann::json(static_cast<int64_t>(spec.minval))
                          : nlohmann::json(spec.minval));
    out << YAML::Key << "maxval" << YAML::Value;
    emit_json(out, is_int ? nlohmann::json(static_cast<int64_t>(spec.maxval))
                          : nlohmann::json(spec.maxval));
    if (spec.type == Type::kLog) {
      out << YAML::Key << "base" << YAML::Value;
      emit_json(out, nlohmann::json(spec.base));
    }
    if (spec.count > 0) out << YAML::Key << "count" << YAML::Value << spec.count;
  }
  out << YAML::EndMap;
}

}  // namespace

std::string to_yaml(const ExperimentConfig& c) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  out << YAML::Key << "name" << YAML::Value;
  emit_string(out, c.name);
  if (!c.description.empty()) {
    out << YAML::Key << "description" << YAML::Value;
    emit_string(out, c.description);
  }
  out << YAML::Key << "entrypoint" << YAML::Value;
  emit_string(out, c.entrypoint);
  out << YAML::Key << "hyperparameters" << YAML::Value << YAML::BeginMap;
  for (const auto& [name, spec] : c.hyperparameters) {
    out << YAML::Key << name << YAML::Value;
    emit_hyperparameter(out, spec);
  }
  out << YAML::EndMap;
  out << YAML::Key << "searcher" << YAML::Value << YAML::Flow << YAML::BeginMap << YAML::Key
      << "name" << YAML::Value << c.searcher.name << YAML::Key << "metric" << YAML::Value;
  emit_string(out, c.searcher.metric);
  out << YAML::Key << "smaller_is_better" << YAML::Value
      << (c.searcher.smaller_is_better ? "true" : "false") << YAML::Key << "max_trials"
      << YAML::Value << c.searcher.max_trials << YAML::EndMap;
  emit_length(out, "max_length", c.max_length);
  out << YAML::Key << "records_per_epoch" << YAML::Value << c.records_per_epoch;
  emit_length(out, "min_validation_period", c.min_validation_period);
  emit_length(out, "min_checkpoint_period", c.min_checkpoint_period);
  out << YAML::Key << "perform_initial_validation" << YAML::Value
      << (c.perform_initial_validation ? "true" : "false");
  out << YAML::Key << "checkpoint_policy" << YAML::Value
      << (c.checkpoint_policy == CheckpointPolicy::kBest  ? "best"
          : c.checkpoint_policy == CheckpointPolicy::kAll ? "all"
                                                          : "none");
  out << YAML::Key << "checkpoint_storage" << YAML::Value << YAML::Flow << YAML::BeginMap
      << YAML::Key << "host_path" << YAML::Value;
  emit_string(out, c.checkpoint_storage.host_path);
  out << YAML::Key << "save_trial_best" << YAML::Value << c.checkpoint_storage.save_trial_best
      << YAML::Key << "save_trial_latest" << YAML::Value << c.checkpoint_storage.save_trial_latest
      << YAML::EndMap;
  out << YAML::Key << "resources" << YAML::Value << YAML::Flow << YAML::BeginMap << YAML::Key
      << "slots_per_trial" << YAML::Value << c.resources.slots_per_trial << YAML::Key
      << "distributed_timeout_seconds" << YAML::Value << c.resources.distributed_timeout_seconds
      << YAML::Key << "distributed_backend" << YAML::Value
      << (c.resources.distributed_backend == DistributedBackend::kGloo   ? "gloo"
          : c.resources.distributed_backend == DistributedBackend::kNccl ? "nccl"
                                                                         : "auto")
      << YAML::EndMap;
  out << YAML::Key << "optimizations" << YAML::Value << YAML::Flow << YAML::BeginMap << YAML::Key
      << "aggregation_frequency" << YAML::Value << c.optimizations.aggregation_frequency
      << YAML::Key << "average_aggregated_gradients" << YAML::Value
      << (c.optimizations.average_aggregated_gradients ? "true" : "false") << YAML::Key
      << "gradient_bucket_mb" << YAML::Value << c.optimizations.gradient_bucket_mb << YAML::Key
      << "gradient_as_bucket_view" << YAML::Value
      << (c.optimizations.gradient_as_bucket_view ? "true" : "false") << YAML::EndMap;
  out << YAML::Key << "reproducibility" << YAML::Value << YAML::Flow << YAML::BeginMap << YAML::Key
      << "experiment_seed" << YAML::Value << c.reproducibility.experiment_seed << YAML::EndMap;
  out << YAML::Key << "scheduling_unit" << YAML::Value << c.scheduling_unit;
  out << YAML::Key << "data" << YAML::Value;
  if (c.data.empty()) {
    out << YAML::Flow << YAML::BeginMap << YAML::EndMap;
  } else {
    emit_json(out, c.data);
  }
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

}  // namespace crucible
