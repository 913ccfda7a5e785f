#pragma once

// Running the RecordingTrial through the library's Trainer, into a scratch run directory.

#include <string>
#include <vector>

#include "catch.h"

#include <crucible/crucible.h>

#include "process.h"
#include "test_trials.h"

namespace crucible::testing {

// An experiment for RecordingTrial with `extra` YAML lines appended and `overrides` applied.
inline ExperimentConfig recording_config(const std::string& extra,
                                         const std::vector<std::string>& overrides = {}) {
  return parse_experiment_config(R"(name: recording
entrypoint: crucible_test_trials:RecordingTrial
hyperparameters:
  global_batch_size: 8
  records: 100
  validation_records: 25
  validation_batch_size: 4
reproducibility: {experiment_seed: 3}
searcher: {name: single, metric: validation_avg_x, smaller_is_better: true}
checkpoint_policy: none
checkpoint_storage: {save_trial_latest: 1000}
)" + extra,
                                 "recording.yaml", overrides);
}

template <class T = RecordingTrial>
FitResult fit_recording(const ExperimentConfig& config, const std::string& run_dir,
                        FitOptions options = FitOptions()) {
  RecordingTrial::calls().clear();
  return Trainer(config, TrialFactory::of<T>("RecordingTrial"))
      .fit(options.output_dir(run_dir).console(false));
}

// The message of the crucible::Error `fn` throws (and its exit code into *exit_code); fails the
// test when it throws none.
inline std::string error_of(const std::function<void()>& fn, int* exit_code = nullptr) {
  try {
    fn();
  } catch (const Error& e) {
    if (exit_code) *exit_code = e.exit_code();
    return e.what();
  }
  FAIL("expected a crucible::Error");
  return "";
}

// Batch counts of the checkpoints a run directory holds.
inline std::vector<int64_t> checkpoint_batches(const std::string& run_dir) {
  std::vector<int64_t> out;
  for (const auto& name : util::list_directory(run_dir + "/checkpoints")) {
    if (name.rfind("batch-", 0) == 0) out.push_back(std::stoll(name.substr(6)));
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace crucible::testing
