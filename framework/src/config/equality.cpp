#include <tuple>

#include <crucible/config.h>

// Each comparison binds every member with a structured binding, so a member added to a config
// struct without being compared here does not compile.

namespace crucible {

bool operator==(const HyperparameterSpec& a, const HyperparameterSpec& b) {
  const auto& [type, value, minval, maxval, base, count, vals] = a;
  return std::tie(type, value, minval, maxval, base, count, vals) ==
         std::tie(b.type, b.value, b.minval, b.maxval, b.base, b.count, b.vals);
}

bool operator==(const SearcherConfig& a, const SearcherConfig& b) {
  const auto& [name, metric, smaller_is_better, max_trials, max_concurrent_trials, mode, divisor,
               max_rungs, bracket_rungs, max_time, time_metric, max_length, source_trial_id,
               source_checkpoint_uuid] = a;
  return std::tie(name, metric, smaller_is_better, max_trials, max_concurrent_trials, mode, divisor,
                  max_rungs, bracket_rungs, max_time, time_metric, max_length, source_trial_id,
                  source_checkpoint_uuid) ==
         std::tie(b.name, b.metric, b.smaller_is_better, b.max_trials, b.max_concurrent_trials,
                  b.mode, b.divisor, b.max_rungs, b.bracket_rungs, b.max_time, b.time_metric,
                  b.max_length, b.source_trial_id, b.source_checkpoint_uuid);
}

bool operator==(const CheckpointStorageConfig& a, const CheckpointStorageConfig& b) {
  const auto& [host_path, save_trial_best, save_trial_latest, save_experiment_best] = a;
  return std::tie(host_path, save_trial_best, save_trial_latest, save_experiment_best) ==
         std::tie(b.host_path, b.save_trial_best, b.save_trial_latest, b.save_experiment_best);
}

bool operator==(const ResourcesConfig& a, const ResourcesConfig& b) {
  const auto& [slots_per_trial, distributed_timeout_seconds, distributed_backend] = a;
  return std::tie(slots_per_trial, distributed_timeout_seconds, distributed_backend) ==
         std::tie(b.slots_per_trial, b.distributed_timeout_seconds, b.distributed_backend);
}

bool operator==(const GradientClipping& a, const GradientClipping& b) {
  const auto& [max_norm, norm_type, max_value] = a;
  return std::tie(max_norm, norm_type, max_value) == std::tie(b.max_norm, b.norm_type, b.max_value);
}

bool operator==(const OptimizationsConfig& a, const OptimizationsConfig& b) {
  const auto& [aggregation_frequency, average_aggregated_gradients, gradient_bucket_mb,
               gradient_as_bucket_view, mixed_precision, gradient_clipping, non_finite,
               max_consecutive_skips] = a;
  return std::tie(aggregation_frequency, average_aggregated_gradients, gradient_bucket_mb,
                  gradient_as_bucket_view, mixed_precision, gradient_clipping, non_finite,
                  max_consecutive_skips) ==
         std::tie(b.aggregation_frequency, b.average_aggregated_gradients, b.gradient_bucket_mb,
                  b.gradient_as_bucket_view, b.mixed_precision, b.gradient_clipping, b.non_finite,
                  b.max_consecutive_skips);
}

bool operator==(const EarlyStoppingConfig& a, const EarlyStoppingConfig& b) {
  const auto& [metric, smaller_is_better, patience, min_delta] = a;
  return std::tie(metric, smaller_is_better, patience, min_delta) ==
         std::tie(b.metric, b.smaller_is_better, b.patience, b.min_delta);
}

bool operator==(const ProfilingConfig& a, const ProfilingConfig& b) {
  const auto& [enabled, begin_on_batch, end_after_batch, sync_timings, trace] = a;
  return std::tie(enabled, begin_on_batch, end_after_batch, sync_timings, trace) ==
         std::tie(b.enabled, b.begin_on_batch, b.end_after_batch, b.sync_timings, b.trace);
}

bool operator==(const ReproducibilityConfig& a, const ReproducibilityConfig& b) {
  const auto& [experiment_seed] = a;
  return experiment_seed == b.experiment_seed;
}

bool operator==(const ExperimentConfig& a, const ExperimentConfig& b) {
  const auto& [name, description, entrypoint, hyperparameters, searcher, max_length,
               records_per_epoch, min_validation_period, min_checkpoint_period,
               perform_initial_validation, checkpoint_policy, checkpoint_storage, resources,
               optimizations, reproducibility, early_stopping, profiling, scheduling_unit,
               max_restarts, data, source_path, overrides, warnings] = a;
  (void)source_path;  // where the config was read from, not part of it
  (void)overrides;    // how it was read, not part of it
  (void)warnings;     // what reading it noticed, not part of it
  return std::tie(name, description, entrypoint, hyperparameters, searcher, max_length,
                  records_per_epoch, min_validation_period, min_checkpoint_period,
                  perform_initial_validation, checkpoint_policy, checkpoint_storage, resources,
                  optimizations, reproducibility, early_stopping, profiling, scheduling_unit,
                  max_restarts, data) ==
         std::tie(b.name, b.description, b.entrypoint, b.hyperparameters, b.searcher, b.max_length,
                  b.records_per_epoch, b.min_validation_period, b.min_checkpoint_period,
                  b.perform_initial_validation, b.checkpoint_policy, b.checkpoint_storage,
                  b.resources, b.optimizations, b.reproducibility, b.early_stopping, b.profiling,
                  b.scheduling_unit, b.max_restarts, b.data);
}

}  // namespace crucible
