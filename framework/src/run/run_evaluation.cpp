#include <crucible/experiment.h>

#include <functional>
#include <iostream>

#include <fmt/format.h>

#include "distributed/backend.h"
#include "distributed/rendezvous.h"
#include "launch/launcher.h"
#include "run/join.h"
#include "run/own_command.h"
#include "train/checkpoint_path.h"
#include "train/run_dir.h"
#include "train/run_start.h"
#include "util/crash_report.h"

namespace crucible {
namespace {

// Runs `work` on the ranks options.slots() asks for (see run_validation): `work` gets the
// trainer of the checkpoint, the checkpoint and this process's ranks, and fills in the result on
// rank 0.
EvaluationResult evaluate(
    const EvaluationOptions& options,
    const std::function<void(Trainer&, const std::string&, const DistributedContext&,
                             EvaluationResult&)>& work) {
  if (options.slots() && *options.slots() < 1) {
    throw UsageError(fmt::format("--slots {}: expected at least 1", *options.slots()));
  }
  const std::optional<dist::Rendezvous> launcher =
      dist::from_environment(dist::process_environment());
  // The one process that tells the user: the one they started, or rank 0 of an outside
  // launcher's (Crucible's own launcher has told them already).
  const bool first = !launcher || (launcher->topology.rank == 0 && !launcher->started_by_crucible);
  // Pinned until the evaluation ends: a run still training keeps it meanwhile.
  train::PinnedCheckpoint pinned = train::pin_resolved([&] {
    return train::checkpoint_path(options.checkpoint(), "--checkpoint", [&](const std::string& w) {
      if (first) std::cerr << "warning: " << w << "\n";
    });
  });
  std::string checkpoint = pinned.dir;
  if (first && checkpoint != options.checkpoint()) {
    std::cerr << fmt::format("--checkpoint {}: checkpoint {}\n", options.checkpoint(), checkpoint);
  }
  Trainer trainer = Trainer::from_checkpoint(checkpoint);
  const int64_t slots = launcher ? launcher->topology.size : options.slots().value_or(1);
  if (launcher && options.slots() && *options.slots() != slots) {
    throw UsageError(fmt::format(
        "--slots {} but {} started {} processes; give the launcher's count or leave --slots out",
        *options.slots(), launcher->source, slots));
  }
  const ExperimentConfig& config = trainer.config();
  train::for_evaluation(config, slots);  // refuses a slot count that splits no batch
  if (!launcher && slots > 1) {
    dist::use_nccl(config.resources.distributed_backend, dist::rank_device(0), slots);
    const auto launch_options =
        launch::LaunchOptions()
            .command(options.worker_command().empty() ? run::own_command_line()
                                                      : options.worker_command())
            .slots(slots)
            .plain_rank0_stdout(true);
    const launch::LaunchResult launched = launch::launch(launch_options, std::cout, std::cerr);
    EvaluationResult result;
    result.exit_code = launched.exit_code;
    result.failure = launched.failure;
    return result;
  }
  const DistributedContext dist =
      launcher ? *run::join_launched_evaluation(config) : DistributedContext();
  const util::CrashReports crash_reports(dist.distributed() ? fmt::format("rank {}", dist.rank())
                                                            : "");
  // Every rank takes rank 0's: a run or search still writing may resolve differently (the same
  // run, so the same config and trial).
  if (dist.distributed()) {
    checkpoint = dist.broadcast_object(nlohmann::json(checkpoint)).get<std::string>();
    // Each rank pins what it reads; rank 0's was pinned before the others were given it.
    if (checkpoint != pinned.dir) pinned = train::pin_resolved([&] { return checkpoint; });
  }
  EvaluationResult result;
  work(trainer, checkpoint, dist, result);
  if (!dist.is_chief()) result = EvaluationResult();
  return result;
}

}  // namespace

EvaluationResult run_validation(const EvaluationOptions& options) {
  return evaluate(options, [&](Trainer& trainer, const std::string& checkpoint,
                               const DistributedContext& dist, EvaluationResult& result) {
    result.metrics = trainer.validate(checkpoint, dist);
  });
}

EvaluationResult run_prediction(const EvaluationOptions& options) {
  const std::optional<dist::Rendezvous> launcher =
      dist::from_environment(dist::process_environment());
  if (!launcher || launcher->topology.rank == 0) {
    train::check_output_file(options.predictions_file(), "--output");
  }
  return evaluate(options, [&](Trainer& trainer, const std::string& checkpoint,
                               const DistributedContext& dist, EvaluationResult& result) {
    result.predictions = trainer.predict(checkpoint, options.predictions_file(), dist);
  });
}

}  // namespace crucible
