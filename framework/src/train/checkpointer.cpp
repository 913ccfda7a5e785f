#include "train/checkpointer.h"

#include <algorithm>
#include <chrono>

#include <fmt/format.h>
#include <torch/version.h>

#include <crucible/version.h>

#include "checkpoint/checkpoint.h"
#include "metrics/metric_name.h"
#include "util/file_system.h"

namespace crucible::train {

void Checkpointer::track_existing() {
  for (const auto& dir : checkpoint::list(run_.path)) track(dir);
}

std::optional<checkpoint::Entry> retention_entry(const std::string& dir, const std::string& metric,
                                                 std::string* damage) {
  checkpoint::Metadata meta;
  try {
    meta = checkpoint::metadata(dir);
  } catch (const checkpoint::DamagedCheckpoint& e) {
    if (damage) *damage = e.what();
    return std::nullopt;
  }
  checkpoint::Entry entry{dir, meta.batches, std::nullopt};
  const checkpoint::TrainerState& state = meta.trainer_state;
  if (state.validated_at == entry.batches) {
    entry.metric = metrics::find_validation_metric(state.last_validation, metric);
  }
  return entry;
}

void Checkpointer::track(const std::string& dir) {
  // A damaged one is never counted, never deleted here.
  std::string damage;
  if (auto entry = retention_entry(dir, config_.searcher.metric, &damage)) {
    checkpoints_.push_back(*entry);
  } else {
    logger_.warn(damage + "; retention leaves it in place");
  }
}

void Checkpointer::forget(const std::string& dir) {
  checkpoints_.erase(std::remove_if(checkpoints_.begin(), checkpoints_.end(),
                                    [&](const auto& e) { return e.dir == dir; }),
                     checkpoints_.end());
}

checkpoint::Metadata Checkpointer::metadata(TrialSession& session, const FitState& state,
                                            const metrics::Progress& progress,
                                            const DataPosition& position,
                                            const nlohmann::json& training) const {
  const detail::TrialState& trial = session.state();
  checkpoint::Metadata m;
  m.crucible_version = CRUCIBLE_VERSION_STRING;
  m.libtorch_version = TORCH_VERSION;
  m.trial_class = factory_.name;
  m.entrypoint = config_.entrypoint;
  m.hyperparameters = trial.hparams;
  m.config = to_yaml(config_);
  m.batches = state.batches;
  m.records = progress.records;
  m.epochs = progress.epochs;
  m.data_position = position;
  if (state.validated_at == state.batches) m.validation = state.last_validation;
  checkpoint::TrainerState& t = m.trainer_state;
  t.training = dist_.distributed() ? nlohmann::json(dist_.allgather_object(training)) : training;
  t.last_validation = state.last_validation;
  t.validated_at = state.validated_at;
  t.optimizer_counters = trial.steps.to_json(trial.optimizers);
  t.best_metric = state.best_metric;
  t.test_mode = state.test_mode;
  t.stopped = state.stopped;
  m.optimizer_steps = t.optimizer_counters["optimizer_steps"];
  return m;
}

checkpoint::AccumulatedGradients Checkpointer::accumulated_gradients(
    const checkpoint::Contents& contents) const {
  const std::vector<torch::Tensor> params = checkpoint::gradient_parameters(contents);
  torch::NoGradGuard no_grad;
  auto has = torch::zeros({static_cast<int64_t>(params.size())}, torch::kUInt8);
  for (size_t i = 0; i < params.size(); ++i) {
    has[static_cast<int64_t>(i)] = params[i].grad().defined() ? 1 : 0;
  }
  const std::vector<torch::Tensor> defined = dist_.allgather(has);
  checkpoint::AccumulatedGradients out;
  out.by_rank.resize(defined.size());
  for (size_t i = 0; i < params.size(); ++i) {
    const torch::Tensor& g = params[i].grad();
    const std::vector<torch::Tensor> all =
        dist_.allgather(g.defined() ? g.detach() : torch::zeros_like(params[i]));
    if (!dist_.is_chief()) continue;  // only the chief writes them
    for (size_t r = 0; r < all.size(); ++r) {
      const bool kept = defined[r][static_cast<int64_t>(i)].item<uint8_t>() != 0;
      out.by_rank[r].push_back(kept ? all[r].to(torch::kCPU, /*non_blocking=*/false, /*copy=*/true)
                                    : torch::Tensor());
    }
  }
  return out;
}

void Checkpointer::save(TrialSession& session, FitState& state, const metrics::Progress& progress,
                        const DataPosition& position, const nlohmann::json& training) {
  if (state.checkpoint_current()) return;
  checkpoint::Metadata meta = metadata(session, state, progress, position, training);
  const auto started = std::chrono::steady_clock::now();
  // Every rank's generators (CPU, and its GPU's): the chief writes them all.
  checkpoint::RankGenerators generators;
  if (dist_.distributed()) {
    generators.cpu = dist_.allgather(at::detail::getDefaultCPUGenerator().get_state());
    const torch::Device device = session.state().device;
    if (device.is_cuda()) {
      generators.cuda = dist_.allgather(at::globalContext().defaultGenerator(device).get_state());
    }
  }
  checkpoint::AccumulatedGradients gradients;
  if (state.batches % config_.optimizations.aggregation_frequency != 0) {
    gradients = accumulated_gradients(session.contents());
  }
  std::string dir = util::join(run_.checkpoints(), checkpoint::directory_name(state.batches));
  if (dist_.is_chief()) {
    dir = checkpoint::save(run_.path, state.batches, session.contents(), std::move(meta),
                           generators, gradients);
    forget(dir);
    track(dir);
    apply_retention();
  }
  dist_.barrier();  // the checkpoint exists for every rank from here on
  state.last_checkpoint = dir;
  state.checkpointed_at = state.batches;
  state.checkpoint_validated = state.validated_at == state.batches;
  state.checkpoint_stopped = !state.stopped.empty();
  logger_.info(fmt::format(
      "[checkpoint] batch {:>7}  {} ({:.3f}s)", state.batches, dir,
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count()));
}

void Checkpointer::apply_retention() {
  const auto& storage = config_.checkpoint_storage;
  for (const auto& dir :
       checkpoint::to_delete(checkpoints_, storage.save_trial_latest,
                             std::max(storage.save_trial_best, storage.save_experiment_best),
                             config_.searcher.smaller_is_better)) {
    try {
      checkpoint::remove(dir);
    } catch (const std::exception& e) {
      logger_.warn(fmt::format("cannot delete old checkpoint {}: {}", dir, e.what()));
    }
    forget(dir);
  }
}

}  // namespace crucible::train
