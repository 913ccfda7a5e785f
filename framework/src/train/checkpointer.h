#pragma once

// A fit's checkpoints: their metadata, and which of them retention keeps.

#include <optional>
#include <string>
#include <vector>

#include <crucible/config.h>
#include <crucible/data.h>
#include <crucible/distributed.h>
#include <crucible/registry.h>

#include "checkpoint/retention.h"
#include "metrics/report.h"
#include "train/fit_state.h"
#include "train/run_dir.h"
#include "train/session.h"
#include "util/logger.h"

namespace crucible::train {

// Checkpoint `dir` as retention sees it: its metric is `metric` (searcher.metric) of the
// validation made at exactly its weights. nullopt when the checkpoint is damaged or unreadable,
// with the reason in *damage when `damage` is given.
std::optional<checkpoint::Entry> retention_entry(const std::string& dir, const std::string& metric,
                                                 std::string* damage = nullptr);

// What a checkpoint keeps of the stops trials requested and the ranks' vote has not acted on.
enum class PendingStops {
  kOmit,      // nothing: the end of training, a stop already recorded, a failure
  kNextVote,  // the requests, which the vote after the next batch acts on (several ranks)
  kAgreed,    // the requests, which the vote read at this batch held (a signal won it)
};

// Writes the checkpoints of one run (the chief writes, every rank takes part) and deletes those
// that checkpoint_storage's retention counts no longer keep.
class Checkpointer {
 public:
  Checkpointer(const ExperimentConfig& config, const TrialFactory& factory, RunDir run,
               const DistributedContext& dist, util::Logger& logger)
      : config_(config), factory_(factory), run_(std::move(run)), dist_(dist), logger_(logger) {}

  // Counts the checkpoints already in the run for retention (the chief's; a damaged one is
  // never counted, so never deleted).
  void track_existing();

  // Writes the checkpoint of `session` at state.batches on every rank, unless the one written at
  // that batch is current (FitState::checkpoint_current: a checkpoint without the validation
  // made since at the same batch is written again), and records it in state.last_checkpoint,
  // state.checkpointed_at and state.checkpoint_validated.
  // `progress` is where state.batches stands, `position` the training loader's, `training` this
  // rank's pending training sums. Every rank's generators are saved, and, when state.batches
  // falls inside a gradient-accumulation window, every rank's accumulated gradients. Returns when
  // the checkpoint exists for every rank. Throws TrainingError naming the path when writing fails;
  // existing checkpoints stay.
  // `stops`: whether the checkpoint keeps the ranks' stop requests not acted on yet
  // (checkpoint::TrainerState::stop_requests), and whether the vote read at this batch held one.
  void save(TrialSession& session, FitState& state, const metrics::Progress& progress,
            const DataPosition& position, const nlohmann::json& training,
            PendingStops stops = PendingStops::kOmit);

 private:
  checkpoint::Metadata metadata(TrialSession& session, const FitState& state,
                                const metrics::Progress& progress, const DataPosition& position,
                                const nlohmann::json& training, PendingStops stops) const;
  // Every rank's gradients of checkpoint::gradient_parameters(session.contents()), on the CPU,
  // on the chief (empty lists on the other ranks); every rank takes part. Each optimizer's
  // gradient sync is first brought up to date (detail::gradient_sync: a frozen or unfrozen layer
  // rebuilds it, averaging what the ranks hold); a gradient a sync counts as none
  // (GradientSync::stale_parameters) is saved as none.
  checkpoint::AccumulatedGradients accumulated_gradients(TrialSession& session) const;
  void track(const std::string& dir);
  void forget(const std::string& dir);
  // Deletes the checkpoints retention does not keep, of those up to batch `now`; one that another
  // process has pinned (checkpoint::pin) stays, tracked, for a later call, unless the last pin
  // released deletes it first (checkpoint::remove).
  void apply_retention(int64_t now);

  const ExperimentConfig& config_;
  const TrialFactory& factory_;
  const RunDir run_;
  const DistributedContext& dist_;
  util::Logger& logger_;
  std::vector<checkpoint::Entry> checkpoints_;
};

}  // namespace crucible::train
