#include <crucible/trainer.h>

#include <fmt/format.h>

#include <crucible/experiment.h>

#include "checkpoint/checkpoint.h"
#include "config/paths.h"
#include "train/fit_loop.h"
#include "train/run_start.h"
#include "train/session.h"
#include "util/file_system.h"

namespace crucible {

Trainer::Trainer(ExperimentConfig config, TrialFactory factory)
    : config_(std::move(config)), factory_(std::move(factory)) {
  config::make_paths_absolute(config_);
}

Trainer Trainer::from_checkpoint(const std::string& dir) {
  if (dir.empty()) throw UsageError("--checkpoint DIR is required");
  const std::string meta_path = util::join(dir, "metadata.json");
  if (!util::exists(meta_path)) {
    throw UsageError(
        fmt::format("--checkpoint {}: not a checkpoint (no readable metadata.json)", dir));
  }
  checkpoint::Metadata meta;
  try {
    meta = checkpoint::metadata(dir);
  } catch (const checkpoint::DamagedCheckpoint& e) {
    throw TrainingError(
        fmt::format("{}: damaged or not Crucible checkpoint metadata ({})", meta_path, e.what()));
  }
  if (meta.config.empty()) {
    throw TrainingError(fmt::format("{}: damaged or not Crucible checkpoint metadata", meta_path));
  }
  ExperimentConfig config = parse_experiment_config(meta.config, meta_path);
  const std::string run_dir = util::parent_path(util::parent_path(util::absolute(dir)));
  TrialFactory factory = load_trial(config, run_dir);
  return Trainer(std::move(config), std::move(factory));
}

FitResult Trainer::fit(const FitOptions& options) { return train::fit(config_, factory_, options); }

MetricValues Trainer::validate(const std::string& checkpoint_dir, const DistributedContext& dist) {
  const ExperimentConfig config = train::for_evaluation(config_, dist.size());
  train::check_runnable(config, factory_, dist);
  train::TrialSession session(config, factory_, dist);
  const checkpoint::Metadata meta = checkpoint::load(checkpoint_dir, session.contents());
  detail::set_trained_position(session.state(), meta.batches, meta.epochs);
  return session.validate();
}

}  // namespace crucible
