#pragma once

// A TrialContext without a fit loop, for tests of what the context does on its own.

#include <memory>
#include <string>

#include <crucible/crucible.h>

#include "train/trial_state.h"

namespace crucible::testing {

// The smallest experiment a context reads: batches of 4, one batch long.
inline constexpr const char* kMinimalExperiment = R"(name: c
entrypoint: l:T
hyperparameters: {global_batch_size: 4}
max_length: {batches: 1}
)";

// The context of a trial of the experiment `yaml`, on the CPU, at batch 0. Tests set
// state.batch_idx and config fields as they go.
struct ContextFixture {
  ExperimentConfig config;
  detail::TrialState state;
  std::unique_ptr<TrialContext> context = detail::TrialContextAccess::make(&state);
  TrialContext& ctx = *context;

  explicit ContextFixture(const std::string& yaml = kMinimalExperiment)
      : config(parse_experiment_config(yaml, "fixture.yaml")) {
    state.config = &config;
    state.hparams = config.constant_hyperparameters();
  }
};

}  // namespace crucible::testing
