#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <fmt/format.h>

#include <crucible/errors.h>
#include <crucible/registry.h>

#include "checkpoint/checkpoint.h"
#include "metrics/reducer.h"
#include "train/trial_state.h"
#include "util/user_code.h"

namespace crucible::train {

using util::call_trial;

inline auto named(const char* name) {
  return [name] { return name; };
}

// Calls `build`, the trial's loader method `method` (such as "build_training_data_loader"), as
// call_trial does and inside a CrashScope naming it, and makes its loader one the trainer reads:
// refuses an empty one (TrainingError naming the method) and gives it the trial seed when it has
// no seed of its own. With `shard`, the loader is also sharded for this rank (state.dist) that
// way and yields its batches on state.device; without, it is left whole, on the CPU.
DataLoader build_trial_loader(const char* method, const std::function<DataLoader()>& build,
                              const detail::TrialState& state,
                              std::optional<ShardMode> shard = std::nullopt);

// Calls visit(batch, index) on each batch of `loader`, sharded across dist's ranks with
// ShardMode::kStrideBatches, that this rank holds, in order; `index` is the batch's place in the
// unsharded order. Stops after a visit that returns false. What the loader throws while taking a
// batch becomes an error naming "`loader_name` data loader (`unit` INDEX)" (call_trial).
template <class Visit>
void for_each_strided_batch(DataLoader& loader, const DistributedContext& dist,
                            const char* loader_name, const char* unit, Visit&& visit) {
  int64_t k = 0;
  const auto index = [&] { return k * dist.size() + dist.rank(); };
  const auto taking = [&] {
    return fmt::format("{} data loader ({} {})", loader_name, unit, index());
  };
  for (auto it = call_trial(taking, [&] { return loader.begin(); }); it != loader.end();
       ++k, call_trial(taking, [&] { ++it; })) {
    if (!visit(*it, index())) return;
  }
}

// One trial, constructed: its state, its context, and the checkpointable contents it wrapped.
class TrialSession {
 public:
  // Seeds the CPU generator with the trial seed, constructs the trial and builds its callbacks.
  // Throws the errors of DESIGN.md (constructor failures name the trial; a null callback or a
  // name other than letters, digits and '_' is a TrainingError naming it).
  // In a distributed run (`dist` of several ranks) every rank then takes rank 0's parameters and
  // buffers, and reseeds its CPU generator with a seed of its own.
  TrialSession(const ExperimentConfig& config, const TrialFactory& factory,
               const DistributedContext& dist = DistributedContext());

  Trial& trial() { return *trial_; }
  TrialContext& context() { return *context_; }
  detail::TrialState& state() { return state_; }
  const checkpoint::Contents& contents() const { return contents_; }
  // Adds a piece of state to every checkpoint of this session (checkpoint::Contents::add_part).
  void add_checkpoint_part(checkpoint::Part part) { contents_.add_part(std::move(part)); }
  const TrialFactory& factory() const { return factory_; }
  // The trial's callbacks, in name order.
  const Callbacks& callbacks() const { return contents_.callbacks; }

  // Evaluates at most `max_batches` batches (all when < 0) of the validation loader, which the
  // first call builds and every call reads from its start, in
  // eval mode without gradients; returns the metrics, each named "validation_<name>". In a
  // distributed run each rank evaluates its stride of the batches and the results are reduced
  // across ranks exactly (AVG weighted by records); evaluate_full_dataset runs on rank 0 alone
  // over the whole loader and its result is broadcast. The trial's MetricReducers are reset
  // before the pass and add their metrics after it (their cross-slot step on every rank). Throws
  // TrainingError when two metrics get one name ("loss" and "validation_loss").
  MetricValues validate(int64_t max_batches = -1);

 private:
  // Adds each wrapped reducer's metric to `values`: per-slot summaries all-gathered, reduced on
  // every rank. Throws TrainingError when a name is taken by an evaluate_batch metric.
  void reduce_custom(MetricValues& values);

  const ExperimentConfig& config_;
  const TrialFactory& factory_;
  detail::TrialState state_;
  std::unique_ptr<TrialContext> context_;
  std::unique_ptr<Trial> trial_;
  checkpoint::Contents contents_;
  // The validation loader, built at the first validation and kept, as Determined's trials keep
  // theirs: building it may load a dataset from disk. Last, so that its worker threads end
  // before the trial and its models go.
  std::optional<DataLoader> validation_loader_;
};

}  // namespace crucible::train
