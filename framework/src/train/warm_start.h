#pragma once

// Where a new run's starting weights come from.

#include <functional>
#include <string>

#include <crucible/config.h>

namespace crucible::train {

// Throws ConfigError naming the key when searcher.source_trial_id holds no run or experiment
// (no config.yaml) or searcher.source_checkpoint_uuid no checkpoint (no metadata.json). Reads
// no checkpoint: warm_start_checkpoint verifies the one it picks.
void check_warm_start_source(const ExperimentConfig& config);

// The checkpoint whose model weights start a new run of `config`: the one `given` (--warm-start)
// names (checkpoint_path: a checkpoint, a run's newest, an experiment's best) when set, else the
// newest good checkpoint of run directory searcher.source_trial_id (or the best of an experiment
// there), else checkpoint
// searcher.source_checkpoint_uuid; "" when none is set. Damaged newer checkpoints of the source
// run are reported through `warn` and skipped. Throws ConfigError naming the key when its path
// holds no run, no checkpoint or no good one, and checkpoint_path's errors for `given`.
std::string warm_start_checkpoint(const ExperimentConfig& config, const std::string& given,
                                  const std::function<void(const std::string&)>& warn);

}  // namespace crucible::train
