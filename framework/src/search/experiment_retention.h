#pragma once

// What a search's end keeps of its trials' checkpoints.

#include <functional>
#include <string>
#include <vector>

#include <crucible/config.h>

namespace crucible::search {

// The checkpoints a search's end deleted, and those it could not delete yet.
struct ExperimentRetention {
  std::vector<std::string> deleted;
  // Pinned by another process (trainer validate, predict, a warm start), which deletes each when
  // it lets it go (checkpoint::remove).
  std::vector<std::string> being_read;
};

// With checkpoint_storage.save_experiment_best N > 0, deletes each checkpoint of the trials'
// `run_dirs` that is neither kept by its own trial's retention (save_trial_latest newest,
// save_trial_best best, the newest and the single best always) nor among the N best over all
// trials (by searcher.metric; equal metrics by path). Damaged checkpoints are left alone. Deletes
// none when N is 0, as each trial then kept only its own. One that cannot be deleted stays, and
// `warn` gets a line naming it and the cause. Requires that no trial is running.
ExperimentRetention keep_experiment_best(const ExperimentConfig& config,
                                         const std::vector<std::string>& run_dirs,
                                         const std::function<void(const std::string&)>& warn);

}  // namespace crucible::search
