#pragma once

// metadata.json of a checkpoint, as one type.

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include <crucible/data.h>
#include <crucible/metrics.h>

namespace crucible::checkpoint {

// What a fit needs besides the trial's contents to continue exactly ("trainer_state").
struct TrainerState {
  // The pending training sums: one rank's, or in a distributed run an array of every rank's.
  nlohmann::json training = nlohmann::json::object();
  MetricValues last_validation;  // metrics of the last validation
  int64_t validated_at = -1;     // batches trained at it; -1 before the first
  // Which optimizer stepped (train::OptimizerSteps::to_json); null in checkpoints without it.
  nlohmann::json optimizer_counters;
  std::optional<double> best_metric;  // the best searcher metric so far
  // Written by `trainer fit --test-mode` (one batch, validated on one batch): never continued.
  bool test_mode = false;
  // Why a trial's request or early stopping ended the run before max_length; "" while it goes
  // on. A run that stopped so is never trained further.
  std::string stopped;
  // A stop requested and not yet acted on (its reason; "": none), one entry per rank, so that the
  // resumed run stops where the run without the interruption stops: at once when
  // `stop_agreed` (the ranks' vote at this batch held it), else after the next batch. Empty
  // when no rank has one.
  std::vector<std::string> stop_requests;
  bool stop_agreed = false;
};

// Everything metadata.json holds. The fit fills the first group; save() fills the second from
// the checkpoint's contents and files.
struct Metadata {
  std::string crucible_version;
  std::string libtorch_version;
  std::string trial_class;
  std::string entrypoint;
  nlohmann::json hyperparameters = nlohmann::json::object();
  std::string config;   // the resolved config as YAML
  int64_t batches = 0;  // batches trained
  int64_t records = 0;
  double epochs = 0;
  nlohmann::json optimizer_steps = nlohmann::json::array();  // per wrapped optimizer
  DataPosition data_position;                                // the training loader's
  // The validation metrics at exactly these weights; empty when the last validation was earlier.
  MetricValues validation;
  TrainerState trainer_state;

  // Each wrapped scheduler's LRScheduler::state(), in wrap order.
  nlohmann::json schedulers = nlohmann::json::array();
  size_t num_models = 0;
  size_t num_optimizers = 0;
  nlohmann::json callbacks = nlohmann::json::array();  // callback names, in save order
  nlohmann::json parts = nlohmann::json::array();      // registered part names, in save order
  size_t cuda_devices = 0;                             // GPUs the writer saw
  nlohmann::json files = nlohmann::json::object();     // name -> {"size", "crc32"}

  nlohmann::json to_json() const;
  // Reads what to_json wrote; a key that is absent keeps its default. Throws DamagedCheckpoint
  // naming `path` and the key when a value has the wrong type, or the file list or batch count
  // is missing.
  static Metadata from_json(const nlohmann::json& json, const std::string& path);
};

}  // namespace crucible::checkpoint
