#pragma once

// The fit loop of DESIGN.md §3.

#include <crucible/trainer.h>

namespace crucible::train {

// Trainer::fit: trains one trial of `config` as `options` asks, on the ranks of
// options.distributed().
FitResult fit(const ExperimentConfig& config, const TrialFactory& factory,
              const FitOptions& options);

}  // namespace crucible::train
