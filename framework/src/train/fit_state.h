#pragma once

// Where a fit stands.

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include <crucible/metrics.h>

namespace crucible::train {

// The counters and results of one fit that its parts share and its checkpoints restore.
struct FitState {
  int64_t batches = 0;                // batches trained
  int64_t validated_at = -1;          // `batches` at the last validation; -1 before the first
  MetricValues last_validation;       // its reduced metrics
  std::optional<double> best_metric;  // the best searcher metric so far
  bool test_mode = false;             // `trainer fit --test-mode`: its checkpoint says so
  // Why a trial's request or early stopping ended the run early ("" while it goes on): its
  // checkpoints say so, and a resume trains no further.
  std::string stopped;
  std::string last_checkpoint;   // the newest checkpoint written or restored; "" before
  int64_t checkpointed_at = -1;  // `batches` at last_checkpoint

  // Whether the checkpoint at this batch is current: written, holding the validation when one
  // was made at this batch (a stop checkpoint written before the final validation is not), and
  // the stop when the run stopped early at it.
  bool checkpoint_current() const {
    return checkpointed_at == batches && (checkpoint_validated || validated_at != batches) &&
           checkpoint_stopped == !stopped.empty();
  }
  bool checkpoint_validated = false;  // last_checkpoint holds the validation at its batch
  bool checkpoint_stopped = false;    // last_checkpoint records `stopped`

  // What the last good checkpoint is, for error messages.
  std::string last_good_checkpoint() const {
    return last_checkpoint.empty() ? "No checkpoint was written yet."
                                   : "The last good checkpoint is " + last_checkpoint;
  }
};

}  // namespace crucible::train
