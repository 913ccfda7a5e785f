#include "checkpoint/metadata.h"

#include <cmath>

#include <fmt/format.h>

#include <crucible/json_value.h>

#include "checkpoint/checkpoint.h"
#include "util/json_number.h"

namespace crucible::checkpoint {

nlohmann::json Metadata::to_json() const {
  const TrainerState& t = trainer_state;
  nlohmann::json out = {
      {"crucible_version", crucible_version},
      {"libtorch_version", libtorch_version},
      {"trial_class", trial_class},
      {"entrypoint", entrypoint},
      {"hyperparameters", hyperparameters},
      {"config", config},
      {"batches", batches},
      {"records", records},
      {"epochs", epochs},
      {"optimizer_steps", optimizer_steps},
      {"data_position", {{"epoch", data_position.epoch}, {"batch", data_position.batch}}},
      {"validation", util::numbers_json(validation)},
      {"trainer_state",
       {{"training", t.training},
        {"last_validation", util::numbers_json(t.last_validation)},
        {"validated_at", t.validated_at},
        {"optimizer_counters", t.optimizer_counters},
        {"best_metric", t.best_metric ? util::number_json(*t.best_metric) : nlohmann::json()}}},
      {"schedulers", schedulers},
      {"num_models", num_models},
      {"num_optimizers", num_optimizers},
      {"callbacks", callbacks},
      {"parts", parts},
      {"cuda_devices", cuda_devices},
      {"files", files},
  };
  // Only where set: the metadata of every other checkpoint stays as before.
  if (t.test_mode) out["trainer_state"]["test_mode"] = true;
  if (!t.stopped.empty()) out["trainer_state"]["stopped"] = t.stopped;
  if (!t.stop_requests.empty()) {
    out["trainer_state"]["stop_requests"] = t.stop_requests;
    out["trainer_state"]["stop_agreed"] = t.stop_agreed;
  }
  return out;
}

namespace {

// Reads `key` of `json` into `out` when present; a value of another type is a DamagedCheckpoint.
template <class T>
void read(const nlohmann::json& json, const char* key, T& out, const std::string& path) {
  const auto it = json.find(key);
  if (it == json.end() || it->is_null()) return;
  const auto damaged = [&] {
    return DamagedCheckpoint(
        fmt::format("{}: '{}' is {}, not of the type a checkpoint writes", path, key, it->dump()));
  };
  try {
    out = detail::json_as<T>(*it, key);  // integers only from integers that T holds
  } catch (const Error&) {
    throw damaged();
  }
}

// A metric as util::number_json writes it; anything else is a DamagedCheckpoint.
double metric_value(const nlohmann::json& value, const std::string& what, const std::string& path) {
  const std::optional<double> v = util::number_from_json(value);
  if (!v) {
    throw DamagedCheckpoint(fmt::format("{}: {} is {}, not a number", path, what, value.dump()));
  }
  return *v;
}

void read(const nlohmann::json& json, const char* key, MetricValues& out, const std::string& path) {
  nlohmann::json values = nlohmann::json::object();
  read(json, key, values, path);
  if (!values.is_object()) {
    throw DamagedCheckpoint(fmt::format("{}: '{}' is {}, not metrics", path, key, values.dump()));
  }
  out.clear();
  for (const auto& [name, value] : values.items()) {
    out[name] = metric_value(value, fmt::format("metric '{}' in '{}'", name, key), path);
  }
}

}  // namespace

Metadata Metadata::from_json(const nlohmann::json& json, const std::string& path) {
  if (!json.is_object() || !json.contains("files") || !json["files"].is_object() ||
      !json.contains("batches")) {
    throw DamagedCheckpoint(fmt::format("{} lacks its file list", path));
  }
  Metadata m;
  read(json, "crucible_version", m.crucible_version, path);
  read(json, "libtorch_version", m.libtorch_version, path);
  read(json, "trial_class", m.trial_class, path);
  read(json, "entrypoint", m.entrypoint, path);
  read(json, "hyperparameters", m.hyperparameters, path);
  read(json, "config", m.config, path);
  read(json, "batches", m.batches, path);
  read(json, "records", m.records, path);
  read(json, "epochs", m.epochs, path);
  read(json, "optimizer_steps", m.optimizer_steps, path);
  nlohmann::json position = nlohmann::json::object();
  read(json, "data_position", position, path);
  read(position, "epoch", m.data_position.epoch, path);
  read(position, "batch", m.data_position.batch, path);
  read(json, "validation", m.validation, path);
  nlohmann::json state = nlohmann::json::object();
  read(json, "trainer_state", state, path);
  TrainerState& t = m.trainer_state;
  read(state, "training", t.training, path);
  read(state, "last_validation", t.last_validation, path);
  read(state, "validated_at", t.validated_at, path);
  if (state.contains("optimizer_counters")) t.optimizer_counters = state["optimizer_counters"];
  if (state.contains("best_metric") && !state["best_metric"].is_null()) {
    t.best_metric = metric_value(state["best_metric"], "'best_metric'", path);
  }
  if (state.contains("test_mode")) read(state, "test_mode", t.test_mode, path);
  if (state.contains("stopped")) read(state, "stopped", t.stopped, path);
  if (state.contains("stop_requests")) read(state, "stop_requests", t.stop_requests, path);
  if (state.contains("stop_agreed")) read(state, "stop_agreed", t.stop_agreed, path);
  read(json, "schedulers", m.schedulers, path);
  if (!json.contains("schedulers") && json.contains("scheduler_steps")) {
    // Checkpoints before scheduler states held step counts only.
    nlohmann::json steps = nlohmann::json::array();
    read(json, "scheduler_steps", steps, path);
    for (const auto& n : steps) m.schedulers.push_back({{"step_count", n}});
  }
  if (!m.schedulers.is_array()) {
    throw DamagedCheckpoint(
        fmt::format("{}: 'schedulers' is {}, not a list", path, m.schedulers.dump()));
  }
  read(json, "num_models", m.num_models, path);
  read(json, "num_optimizers", m.num_optimizers, path);
  read(json, "callbacks", m.callbacks, path);
  read(json, "parts", m.parts, path);
  read(json, "cuda_devices", m.cuda_devices, path);
  read(json, "files", m.files, path);
  for (const auto& [name, entry] : m.files.items()) {
    const bool well_formed = entry.is_object() && entry.contains("size") &&
                             entry["size"].is_number_integer() && entry["size"] >= 0 &&
                             entry.contains("crc32") && entry["crc32"].is_string();
    if (!well_formed) {
      throw DamagedCheckpoint(fmt::format(
          "{}: the entry of file '{}' is {}, not its size and crc32", path, name, entry.dump()));
    }
  }
  return m;
}

}  // namespace crucible::checkpoint
