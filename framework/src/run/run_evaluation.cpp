#include <crucible/experiment.h>

#include <functional>
#include <iostream>

#include <fmt/format.h>

#include "distributed/backend.h"
#include "distributed/rendezvous.h"
#include "launch/launcher.h"
#include "run/own_command.h"
#include "train/run_start.h"
#include "util/crash_report.h"

namespace crucible {
namespace {

// Runs `work` on the ranks options.slots() asks for (see run_validation): `work` gets the
// trainer of the checkpoint and this process's ranks, and fills in the result on rank 0.
EvaluationResult evaluate(
    const EvaluationOptions& options,
    const std::function<void(Trainer&, const DistributedContext&, EvaluationResult&)>& work) {
  if (options.slots() && *options.slots() < 1) {
    throw UsageError(fmt::format("--slots {}: expected at least 1", *options.slots()));
  }
  Trainer trainer = Trainer::from_checkpoint(options.checkpoint());
  const std::optional<dist::Rendezvous> launcher =
      dist::from_environment(dist::process_environment());
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
    launch::LaunchOptions launch_options;
    launch_options.command =
        options.worker_command().empty() ? run::own_command_line() : options.worker_command();
    launch_options.slots = slots;
    launch_options.plain_rank0_stdout = true;
    const launch::LaunchResult launched = launch::launch(launch_options, std::cout, std::cerr);
    EvaluationResult result;
    result.exit_code = launched.exit_code;
    result.failure = launched.failure;
    return result;
  }
  const DistributedContext dist = launcher ? *join_launched_run(config) : DistributedContext();
  const util::CrashReports crash_reports(dist.distributed() ? fmt::format("rank {}", dist.rank())
                                                            : "");
  EvaluationResult result;
  work(trainer, dist, result);
  if (!dist.is_chief()) result = EvaluationResult();
  return result;
}

}  // namespace

EvaluationResult run_validation(const EvaluationOptions& options) {
  return evaluate(options,
                  [&](Trainer& trainer, const DistributedContext& dist, EvaluationResult& result) {
                    result.metrics = trainer.validate(options.checkpoint(), dist);
                  });
}

EvaluationResult run_prediction(const EvaluationOptions& options) {
  return evaluate(options, [&](Trainer& trainer, const DistributedContext& dist,
                               EvaluationResult& result) {
    result.predictions = trainer.predict(options.checkpoint(), options.predictions_file(), dist);
  });
}

}  // namespace crucible
