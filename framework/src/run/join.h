#pragma once

#include <optional>

#include <crucible/config.h>
#include <crucible/distributed.h>

namespace crucible::run {

// As join_launched_run, but the ranks are compared at the roll call by their Crucible and
// LibTorch builds only, not by their configs: ranks of an evaluation may each resolve another
// checkpoint of the run (a newer one, another trial's `best`), and take rank 0's once joined.
std::optional<DistributedContext> join_launched_evaluation(const ExperimentConfig& config);

}  // namespace crucible::run
