#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace crucible {

enum class LengthUnit { kBatches, kEpochs, kRecords };

// A training length or period: `{batches: n}`, `{epochs: n}` or `{records: n}`. A period of 0
// means never.
struct Length {
  LengthUnit unit = LengthUnit::kBatches;
  int64_t value = 0;

  bool operator==(const Length& other) const { return unit == other.unit && value == other.value; }
  // "5 epochs", "100 batches", "1 batch": the value and the unit's name, singular for 1.
  std::string str() const;
};

// One entry of `hyperparameters`: a constant, or a search space for a later searcher.
struct HyperparameterSpec {
  enum class Type { kConst, kInt, kDouble, kLog, kCategorical };
  Type type = Type::kConst;
  nlohmann::json value;              // kConst
  double minval = 0, maxval = 0;     // kInt, kDouble, kLog (exponents for kLog)
  double base = 10;                  // kLog
  int64_t count = 0;                 // grid points for kInt/kDouble/kLog; 0 = unset
  std::vector<nlohmann::json> vals;  // kCategorical
};

// How adaptive ASHA spreads its trials over brackets (../shared/SEARCH.md).
enum class AshaMode { kAggressive, kStandard, kConservative };

// The most rungs an adaptive ASHA bracket has: past 2^63 units a rung only repeats a length of 1.
constexpr int64_t kMostBracketRungs = 64;

// The rung counts of the brackets that `mode` makes when a bracket has at most `rungs` rungs,
// most first: aggressive [rungs]; standard [rungs, ..., (rungs - 1) / 2 + 1]; conservative
// [rungs, ..., 1]. Requires 1 <= rungs <= kMostBracketRungs.
std::vector<int64_t> mode_brackets(AshaMode mode, int64_t rungs);

// The searcher of an experiment (`searcher.name`).
enum class SearcherName {
  kSingle,        // one trial, its hyperparameters constants
  kGrid,          // a trial per point of the hyperparameters' grid
  kRandom,        // max_trials trials, hyperparameters drawn at random
  kAdaptiveAsha,  // adaptive ASHA: random trials, the worst stopped at each rung
};

// `searcher`, with Determined's keys and defaults.
struct SearcherConfig {
  SearcherName name = SearcherName::kSingle;
  std::string metric = "validation_loss";
  bool smaller_is_better = true;
  int64_t max_trials = 1;
  int64_t max_concurrent_trials = 16;  // 0 = no limit
  // adaptive_asha: brackets, the rung ratio and the most rungs.
  AshaMode mode = AshaMode::kStandard;
  int64_t divisor = 4;
  int64_t max_rungs = 5;
  // adaptive_asha: each bracket's rung count, most first, in place of the brackets that mode
  // makes from the computed rung count; empty = those. Each is 1..64.
  std::vector<int64_t> bracket_rungs;
  // adaptive_asha's trial length: max_time units of the validation metric time_metric (the
  // current form), or max_length (the older form); 0 = unset.
  int64_t max_time = 0;
  std::string time_metric;
  Length max_length;
  // Warm start of a new run, or of every trial of a search (Determined's keys, here paths; made
  // absolute against the experiment file's directory): the model weights of the newest good
  // checkpoint of run directory source_trial_id, or of checkpoint directory
  // source_checkpoint_uuid. "" = none; at most one is set. --warm-start takes precedence.
  std::string source_trial_id;
  std::string source_checkpoint_uuid;
};

enum class CheckpointPolicy { kBest, kAll, kNone };

struct CheckpointStorageConfig {
  std::string host_path = "runs";
  int64_t save_trial_best = 1;
  int64_t save_trial_latest = 1;
  // A search keeps, at its end, the experiment's this many best checkpoints over all trials
  // beside each trial's save_trial_best and save_trial_latest (while it runs, a trial keeps
  // max(save_trial_best, save_experiment_best) best).
  int64_t save_experiment_best = 0;
};

// Which c10d process group carries CUDA tensors (CPU tensors always go over Gloo).
enum class DistributedBackend {
  kAuto,  // NCCL for CUDA tensors when this LibTorch has it, else Gloo
  kGloo,
  kNccl,  // required: an error without NCCL or CUDA
};

struct ResourcesConfig {
  int64_t slots_per_trial = 1;
  // How long a rank waits for the others (rendezvous, each collective) before it fails.
  double distributed_timeout_seconds = 300;
  DistributedBackend distributed_backend = DistributedBackend::kAuto;
};

// The dtype autocast computes in during train_batch and evaluate_batch.
enum class MixedPrecision {
  kNone,  // full precision
  kFp16,  // float16 autocast on CUDA, with a dynamic gradient scaler (CUDA only)
  kBf16,  // bfloat16 autocast, on CUDA and CPU; no scaler
};

// What a non-finite training loss or gradient does.
enum class NonFinitePolicy {
  kStop,  // fail naming the batch, the epoch and the metric; the last good checkpoint stays
  kSkip,  // skip the optimizer step and count it (metric skipped_steps); max_consecutive_skips
          // skips in a row is an error
};

// Gradient clipping after cross-rank averaging and unscaling. At most one of the two is set.
struct GradientClipping {
  double max_norm = 0;   // > 0: scale the gradients so their total norm is at most this
  double norm_type = 2;  // the norm's p (a number >= 1, or .inf)
  double max_value = 0;  // > 0: clamp each gradient element to [-max_value, max_value]
  bool enabled() const { return max_norm > 0 || max_value > 0; }
};

struct OptimizationsConfig {
  int64_t aggregation_frequency = 1;
  bool average_aggregated_gradients = true;
  // Largest gradient all-reduce bucket, in MiB.
  double gradient_bucket_mb = 25;
  // Gradients share storage with the all-reduce buckets (no copies; see README).
  bool gradient_as_bucket_view = true;
  MixedPrecision mixed_precision = MixedPrecision::kNone;
  GradientClipping gradient_clipping;
  NonFinitePolicy non_finite = NonFinitePolicy::kStop;
  int64_t max_consecutive_skips = 10;
};

// The built-in EarlyStopping callback, from the experiment file; off when metric is empty.
struct EarlyStoppingConfig {
  std::string metric;             // a validation metric, with or without "validation_"
  bool smaller_is_better = true;  // defaults to searcher.smaller_is_better
  int64_t patience = 0;           // validations without improvement before stopping
  double min_delta = 0;           // an improvement must beat the best by more than this
};

struct ReproducibilityConfig {
  // The seed every trial seed derives from. Unset: a random or adaptive_asha search draws one
  // and records it in its config.yaml; any other run uses 0.
  std::optional<uint64_t> experiment_seed;
};

// Determined's `profiling` keys, plus `trace`: while enabled, the training batches from
// begin_on_batch to end_after_batch (batch indices, both included) are timed by phase, and each
// training report that covers one of them comes with a profiling report of those timings and of
// the chief's system use over the report's period.
struct ProfilingConfig {
  bool enabled = false;
  int64_t begin_on_batch = 0;
  int64_t end_after_batch = -1;  // -1: to the end of training
  // On CUDA, each timing waits for the device's queued work before it ends.
  bool sync_timings = true;
  // The chief also records LibTorch's operator trace of the window (a Chrome trace file); needs
  // end_after_batch, since the trace is held in memory until the window ends.
  bool trace = false;

  // Whether batch `batch_idx` is profiled.
  bool profiles(int64_t batch_idx) const {
    return enabled && batch_idx >= begin_on_batch &&
           (end_after_batch < 0 || batch_idx <= end_after_batch);
  }
};

// A validated experiment file. Every field has its default when the file omits it.
struct ExperimentConfig {
  std::string name;
  std::string description;
  std::string entrypoint;  // "<library>:<TrialClass>"
  std::map<std::string, HyperparameterSpec> hyperparameters;
  SearcherConfig searcher;
  Length max_length;
  int64_t records_per_epoch = 0;  // 0 = the training loader's size
  Length min_validation_period;
  Length min_checkpoint_period;
  bool perform_initial_validation = false;
  CheckpointPolicy checkpoint_policy = CheckpointPolicy::kBest;
  CheckpointStorageConfig checkpoint_storage;
  ResourcesConfig resources;
  OptimizationsConfig optimizations;
  ReproducibilityConfig reproducibility;
  EarlyStoppingConfig early_stopping;
  ProfilingConfig profiling;
  int64_t scheduling_unit = 100;  // batches between training-metric reports
  int64_t max_restarts = 5;       // a search restarts a failed trial this often, from its
                                  // last checkpoint, before recording it as failed
  nlohmann::json data = nlohmann::json::object();

  std::string source_path;  // the file it was read from ("" when parsed from text)
  // The `--set KEY=VALUE` texts applied over the file, in order, for errors to name. Not
  // compared, not written back.
  std::vector<std::string> overrides;
  // One line for each key that was accepted but has no effect here (Determined's cluster keys),
  // naming it and its place. Not compared, not written back.
  std::vector<std::string> warnings;

  // hyperparameters.global_batch_size (validated positive at parse time).
  int64_t global_batch_size() const;
  // The constant hyperparameters as one JSON object. Throws ConfigError naming the first
  // hyperparameter that is a search space.
  nlohmann::json constant_hyperparameters() const;
};

// Field-by-field equality; `source_path`, `overrides` and `warnings` are not compared. A config
// parsed from to_yaml(c) equals c.
bool operator==(const HyperparameterSpec& a, const HyperparameterSpec& b);
bool operator==(const SearcherConfig& a, const SearcherConfig& b);
bool operator==(const CheckpointStorageConfig& a, const CheckpointStorageConfig& b);
bool operator==(const ResourcesConfig& a, const ResourcesConfig& b);
bool operator==(const OptimizationsConfig& a, const OptimizationsConfig& b);
bool operator==(const ReproducibilityConfig& a, const ReproducibilityConfig& b);
bool operator==(const GradientClipping& a, const GradientClipping& b);
bool operator==(const EarlyStoppingConfig& a, const EarlyStoppingConfig& b);
bool operator==(const ProfilingConfig& a, const ProfilingConfig& b);
bool operator==(const ExperimentConfig& a, const ExperimentConfig& b);

// Reads and validates an experiment file, applying `overrides` ("a.b=value", the value typed by
// YAML rules) first. Throws ConfigError whose message starts with `file:line:col:` (or
// `--set a.b:` for an overridden value) and names the key; unknown keys get a "did you mean".
ExperimentConfig load_experiment_config(const std::string& path,
                                        const std::vector<std::string>& overrides = {});

// As load_experiment_config, from text; `source_name` stands for the file in messages.
ExperimentConfig parse_experiment_config(const std::string& yaml_text,
                                         const std::string& source_name,
                                         const std::vector<std::string>& overrides = {});

// One key of the experiment file, as `trainer keys` lists it.
struct ConfigKey {
  std::string path;           // "resources.slots_per_trial"
  std::string default_value;  // as YAML; "" for a required key
  bool required = false;
  bool safe_on_resume = false;         // may change when a run resumes (--allow-safe-changes)
  bool safe_on_search_resume = false;  // may change when a search resumes: not max_length
  std::string description;
};

// Every key the experiment file accepts, in the order of the resolved config.
std::vector<ConfigKey> config_keys();

// The config as YAML with every default spelled out. Parsing it gives back an equal config.
std::string to_yaml(const ExperimentConfig& config);

}  // namespace crucible
