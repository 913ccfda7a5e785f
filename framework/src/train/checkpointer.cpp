#include "train/checkpointer.h"

#include <algorithm>
#include <chrono>
#include <cstring>

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

namespace {

// An archive of `gradients` as bytes: "<i>" for each defined one, copied to the CPU (sparse ones
// stay sparse).
torch::Tensor gradient_archive(const std::vector<torch::Tensor>& gradients) {
  torch::serialize::OutputArchive archive;
  for (size_t i = 0; i < gradients.size(); ++i) {
    if (gradients[i].defined()) archive.write(std::to_string(i), gradients[i].to(torch::kCPU));
  }
  std::vector<char> bytes;
  archive.save_to([&](const void* data, size_t size) {
    const char* begin = static_cast<const char*>(data);
    bytes.insert(bytes.end(), begin, begin + size);
    return size;
  });
  auto out = torch::empty({static_cast<int64_t>(bytes.size())}, torch::kUInt8);
  std::memcpy(out.data_ptr(), bytes.data(), bytes.size());
  return out;
}

// The `count` gradients of gradient_archive's `bytes`, undefined where it holds none.
std::vector<torch::Tensor> gradients_of(const torch::Tensor& bytes, size_t count) {
  torch::serialize::InputArchive archive;
  archive.load_from(static_cast<const char*>(bytes.data_ptr()), static_cast<size_t>(bytes.numel()));
  std::vector<torch::Tensor> out(count);
  for (size_t i = 0; i < count; ++i) archive.try_read(std::to_string(i), out[i]);
  return out;
}

}  // namespace

checkpoint::AccumulatedGradients Checkpointer::accumulated_gradients(
    const checkpoint::Contents& contents) const {
  const std::vector<torch::Tensor> params = checkpoint::gradient_parameters(contents);
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> mine;
  for (const auto& p : params) {
    const torch::Tensor& g = p.grad();
    mine.push_back(g.defined() ? g.detach().to(torch::kCPU, /*non_blocking=*/false, /*copy=*/true)
                               : torch::Tensor());
  }
  checkpoint::AccumulatedGradients out;
  if (!dist_.distributed()) {
    out.by_rank.push_back(std::move(mine));
    return out;
  }
  // One collective for all of them, whatever their layouts: each rank's as an archive.
  const std::vector<torch::Tensor> all = dist_.allgather_bytes(gradient_archive(mine));
  if (!dist_.is_chief()) return out;  // only the chief writes them
  for (const auto& bytes : all) out.by_rank.push_back(gradients_of(bytes, params.size()));
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
