#include "train/checkpointer.h"

#include <algorithm>
#include <chrono>
#include <sstream>
#include <unordered_set>

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
                                            const nlohmann::json& training,
                                            PendingStops stops) const {
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
  if (stops != PendingStops::kOmit) {  // the same on every rank
    const std::string mine = trial.stop_requested ? trial.stop_reason : "";
    std::vector<std::string> requests = {mine};
    if (dist_.distributed()) {
      requests.clear();
      for (const auto& r : dist_.allgather_object(mine)) requests.push_back(r.get<std::string>());
    }
    if (std::any_of(requests.begin(), requests.end(), [](const auto& r) { return !r.empty(); })) {
      t.stop_requests = requests;
      t.stop_agreed = stops == PendingStops::kAgreed;
    }
  }
  m.optimizer_steps = t.optimizer_counters["optimizer_steps"];
  return m;
}

namespace {

// How a rank holds a parameter's gradient, as the ranks tell each other.
enum GradientKind : uint8_t { kNoGradient = 0, kDense = 1, kSparse = 2 };

// An archive of the sparse gradients among `gradients` as bytes: "<i>" for each, on the CPU.
std::string sparse_archive(const std::vector<torch::Tensor>& gradients) {
  torch::serialize::OutputArchive archive;
  for (size_t i = 0; i < gradients.size(); ++i) {
    const torch::Tensor& g = gradients[i];
    if (g.defined() && g.is_sparse()) archive.write(std::to_string(i), g.detach().to(torch::kCPU));
  }
  std::ostringstream bytes;
  archive.save_to(bytes);
  return bytes.str();
}

}  // namespace

checkpoint::AccumulatedGradients Checkpointer::accumulated_gradients(TrialSession& session) const {
  const std::vector<torch::Tensor> params = checkpoint::gradient_parameters(session.contents());
  if (dist_.distributed()) {
    // A layer frozen since the last update is averaged now, as the next update would: a resumed
    // run's new syncs would leave it out with each rank's own gradient.
    for (const auto& optimizer : session.state().optimizers) {
      detail::gradient_sync(session.state(), optimizer);
    }
  }
  std::unordered_set<const c10::TensorImpl*> stale;
  for (const auto& [optimizer, sync] : session.state().grad_syncs) {
    for (const auto& p : sync->stale_parameters()) stale.insert(p.unsafeGetTensorImpl());
  }
  torch::NoGradGuard no_grad;
  checkpoint::AccumulatedGradients out;
  std::vector<torch::Tensor> grads;
  for (const auto& p : params) {
    grads.push_back(stale.count(p.unsafeGetTensorImpl()) ? torch::Tensor() : p.grad());
  }
  const auto copied = [](const torch::Tensor& g) {
    return g.defined() ? g.detach().to(torch::kCPU, /*non_blocking=*/false, /*copy=*/true)
                       : torch::Tensor();
  };
  if (!dist_.distributed()) {
    out.by_rank.emplace_back();
    for (const auto& g : grads) out.by_rank.back().push_back(copied(g));
    return out;
  }
  std::vector<uint8_t> kinds;
  for (const auto& g : grads) {
    kinds.push_back(!g.defined() ? kNoGradient : g.is_sparse() ? kSparse : kDense);
  }
  std::vector<std::vector<uint8_t>> kind;  // [rank][parameter]
  for (const auto& k : dist_.allgather(torch::tensor(kinds, torch::kUInt8))) {
    kind.emplace_back(k.data_ptr<uint8_t>(), k.data_ptr<uint8_t>() + k.numel());
  }
  const size_t ranks = kind.size();
  const auto any_rank = [&](size_t i, GradientKind wanted) {
    for (size_t r = 0; r < ranks; ++r) {
      if (kind[r][i] == wanted) return true;
    }
    return false;
  };
  // Sparse gradients, any rank's, in one collective of archives (they differ in size); the
  // chief keeps them.
  bool any_sparse = false;
  for (size_t i = 0; i < params.size(); ++i) any_sparse |= any_rank(i, kSparse);
  std::vector<torch::serialize::InputArchive> sparse(ranks);
  if (any_sparse) {
    const std::vector<std::string> all = dist_.allgather_bytes(sparse_archive(grads));
    for (size_t r = 0; dist_.is_chief() && r < all.size(); ++r) {
      sparse[r].load_from(all[r].data(), all[r].size());
    }
  }
  // Dense ones one parameter at a time, where they lie (on a GPU, through its backend): at most
  // one parameter's gradients of every rank are held at once. A rank whose gradient of it is
  // sparse or missing sends zeros.
  out.by_rank.resize(ranks);
  for (size_t i = 0; i < params.size(); ++i) {
    std::vector<torch::Tensor> dense;
    if (any_rank(i, kDense)) {
      dense = dist_.allgather(kind[static_cast<size_t>(dist_.rank())][i] == kDense
                                  ? grads[i].detach()
                                  : torch::zeros_like(params[i]));
    }
    if (!dist_.is_chief()) continue;  // only the chief writes them
    for (size_t r = 0; r < ranks; ++r) {
      torch::Tensor g;
      if (kind[r][i] == kDense) g = copied(dense[r]);
      if (kind[r][i] == kSparse) sparse[r].read(std::to_string(i), g);
      out.by_rank[r].push_back(g);
    }
  }
  return out;
}

void Checkpointer::save(TrialSession& session, FitState& state, const metrics::Progress& progress,
                        const DataPosition& position, const nlohmann::json& training,
                        PendingStops stops) {
  if (state.checkpoint_current()) return;
  checkpoint::Metadata meta = metadata(session, state, progress, position, training, stops);
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
    gradients = accumulated_gradients(session);
  }
  std::string dir = util::join(run_.checkpoints(), checkpoint::directory_name(state.batches));
  if (dist_.is_chief()) {
    dir = checkpoint::save(run_.path, state.batches, session.contents(), std::move(meta),
                           generators, gradients);
    forget(dir);
    track(dir);
    apply_retention(state.batches);
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

void Checkpointer::apply_retention(int64_t now) {
  const auto& storage = config_.checkpoint_storage;
  for (const auto& dir :
       checkpoint::to_delete(checkpoints_, storage.save_trial_latest,
                             std::max(storage.save_trial_best, storage.save_experiment_best),
                             config_.searcher.smaller_is_better, now)) {
    try {
      if (!checkpoint::remove(dir)) {
        // Tracked still: the last reader to let it go deletes it, or the next retention pass.
        logger_.info(
            fmt::format("[checkpoint] kept {} for now: {}", dir, checkpoint::kLeftToReader));
        continue;
      }
    } catch (const std::exception& e) {
      logger_.warn(fmt::format("cannot delete old checkpoint {}: {}", dir, e.what()));
    }
    forget(dir);
  }
}

}  // namespace crucible::train
