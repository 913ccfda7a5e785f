#include "train/session.h"

#include <algorithm>
#include <cctype>

#include <crucible/early_stopping.h>

#include "data/shuffle.h"
#include "distributed/backend.h"
#include "distributed/grad_sync.h"
#include "train/eval_mode.h"
#include "train/run_start.h"
#include "util/crash_report.h"

namespace crucible::train {

namespace {

// Moves `loader` to the start of its first epoch (its worker threads stop until the next batch).
void rewind(DataLoader& loader) {
  if (!(loader.position() == DataPosition{})) loader.seek(DataPosition{});
}

// Rewinds a loader when a pass over it ends, however it ends, so that its workers do not build
// the next epoch's batches meanwhile.
class RewindAtEnd {
 public:
  explicit RewindAtEnd(DataLoader& loader) : loader_(loader) {}
  ~RewindAtEnd() {
    try {
      rewind(loader_);
    } catch (...) {  // rewound again before the next pass
    }
  }
  RewindAtEnd(const RewindAtEnd&) = delete;
  RewindAtEnd& operator=(const RewindAtEnd&) = delete;

 private:
  DataLoader& loader_;
};

}  // namespace

DataLoader build_trial_loader(const char* method, const std::function<DataLoader()>& build,
                              const detail::TrialState& state, std::optional<ShardMode> shard) {
  DataLoader loader = call_trial(named(method), [&] {
    const std::string where = std::string("in ") + method;
    const util::CrashScope crash_scope(where.c_str());
    return build();
  });
  if (!loader.dataset()) {
    throw TrainingError(fmt::format("{} returned an empty DataLoader", method));
  }
  if (!loader.options().seed()) loader.set_seed(state.trial_seed);
  if (shard) {
    loader.shard(state.dist.rank(), state.dist.size(), *shard);
    loader.set_device(state.device);
  }
  return loader;
}

TrialSession::TrialSession(const ExperimentConfig& config, const TrialFactory& factory,
                           const DistributedContext& dist)
    : config_(config), factory_(factory) {
  state_.config = &config_;
  state_.dist = dist;
  state_.slots = dist.size();
  state_.grad_sync_options
      .bucket_bytes(std::max<int64_t>(
          1, static_cast<int64_t>(config_.optimizations.gradient_bucket_mb * 1024 * 1024)))
      .as_bucket_view(config_.optimizations.gradient_as_bucket_view);
  state_.hparams = config_.constant_hyperparameters();
  state_.trial_seed = data::mix64(config_.reproducibility.experiment_seed.value_or(0));
  state_.device = dist::rank_device(dist.local_rank());
  torch::manual_seed(state_.trial_seed);
  if (config_.optimizations.mixed_precision == MixedPrecision::kFp16) {
    check_device_support(config_, state_.device);
    state_.scaler = std::make_unique<train::GradScaler>(state_.device);
  }
  context_ = detail::TrialContextAccess::make(&state_);
  try {
    const util::CrashScope crash_scope("in the trial's constructor");
    trial_ = factory_.create(*context_);
  } catch (const Error& e) {
    std::throw_with_nested(Error(
        fmt::format("trial {}: constructor failed: {}", factory_.name, e.what()), e.exit_code()));
  } catch (const std::exception& e) {
    throw PluginError(
        fmt::format("trial {}: constructor threw: {}", factory_.name, message_without_trace(e)));
  } catch (abi::__forced_unwind&) {
    throw;
  } catch (...) {
    throw PluginError(fmt::format("trial {}: constructor threw {}", factory_.name,
                                  util::describe_foreign_exception()));
  }
  state_.constructed = true;
  contents_.models = state_.models;
  contents_.optimizers = state_.optimizers;
  for (const auto& s : state_.schedulers) contents_.schedulers.push_back(s.scheduler);
  contents_.trial = trial_.get();
  contents_.trial_class = factory_.name;
  if (state_.scaler) {
    train::GradScaler* scaler = state_.scaler.get();
    contents_.add_part({"grad_scaler",
                        [scaler](torch::serialize::OutputArchive& a) { scaler->save(a); },
                        [scaler](torch::serialize::InputArchive& a) { scaler->load(a); }});
  }
  if (dist.size() > 1) {
    std::vector<torch::Tensor> buffers;
    for (const auto& m : state_.models) {
      dist::broadcast_module(dist, *m);
      for (const auto& b : m->buffers(true)) buffers.push_back(b);
    }
    state_.buffers = std::make_unique<dist::TensorBroadcast>(dist, buffers);
    torch::manual_seed(data::mix64(state_.trial_seed ^ static_cast<uint64_t>(dist.rank() + 1)));
  }
  contents_.callbacks =
      call_trial(named("build_callbacks"), [&] { return trial_->build_callbacks(); });
  const EarlyStoppingConfig& stop = config_.early_stopping;
  if (!stop.metric.empty()) {
    auto early =
        std::make_shared<EarlyStopping>(*context_, EarlyStoppingOptions(stop.metric)
                                                       .smaller_is_better(stop.smaller_is_better)
                                                       .patience(stop.patience)
                                                       .min_delta(stop.min_delta));
    if (!contents_.callbacks.emplace("early_stopping", early).second) {
      throw TrainingError(
          "build_callbacks: the name 'early_stopping' belongs to the experiment file's "
          "early_stopping callback; rename the trial's callback");
    }
  }
  for (const auto& [name, callback] : contents_.callbacks) {
    const bool valid = !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
    });
    if (!valid || !callback) {
      throw TrainingError(
          fmt::format("build_callbacks: callback '{}' {}", name,
                      valid ? "is null" : "has a name other than letters, digits and '_'"));
    }
  }
}

void TrialSession::reduce_custom(MetricValues& values) {
  // No structured bindings here: C++17 lets no lambda capture one (clang refuses; GCC allows).
  for (const auto& entry : state_.reducers) {
    const auto& name = entry.first;
    const auto& reducer = entry.second;
    const nlohmann::json mine =
        call_trial([&] { return fmt::format("reducer '{}' per_slot_reduce", name); },
                   [&] { return reducer->per_slot_reduce(); });
    const std::vector<nlohmann::json> all = state_.dist.allgather_object(mine);
    const double value =
        call_trial([&] { return fmt::format("reducer '{}' cross_slot_reduce", name); },
                   [&] { return reducer->cross_slot_reduce(all); });
    if (!values.emplace(name, value).second) {
      throw TrainingError(fmt::format(
          "validation metric '{}' comes both from evaluate_batch and from a reducer", name));
    }
  }
}

MetricValues TrialSession::validate(int64_t max_batches) {
  const DistributedContext& dist = state_.dist;
  if (!validation_loader_) {
    validation_loader_ = build_trial_loader(
        "build_validation_data_loader", [&] { return trial_->build_validation_data_loader(); },
        state_,
        factory_.overrides_evaluate_full_dataset ? std::nullopt
                                                 : std::optional(ShardMode::kStrideBatches));
  }
  DataLoader& loader = *validation_loader_;
  rewind(loader);
  const RewindAtEnd rewind_at_end(loader);
  MetricValues values;
  {
    const EvalModeScope eval_mode(state_.models);
    torch::NoGradGuard no_grad;
    for (const auto& entry : state_.reducers) {
      const auto& name = entry.first;
      const auto& reducer = entry.second;
      call_trial([&] { return fmt::format("reducer '{}' reset", name); },
                 [&] { reducer->reset(); });
    }
    if (factory_.overrides_evaluate_full_dataset) {
      nlohmann::json result;
      if (dist.is_chief()) {
        Metrics m = call_trial(named("evaluate_full_dataset"), [&] {
          const util::CrashScope crash_scope("in evaluate_full_dataset");
          const AutocastRegion autocast = context_->autocast(true);
          return trial_->evaluate_full_dataset(loader);
        });
        result = metrics::to_values(m, "evaluate_full_dataset");
      }
      values = dist.broadcast_object(result).get<MetricValues>();
    } else {
      const EvaluationReducer reducer = trial_->evaluation_reducer();
      metrics::ValidationAccumulator acc(reducer);
      // The first max_batches batches of the unsharded order, whichever rank has them.
      for_each_strided_batch(
          loader, dist, "validation", "validation batch", [&](Batch& batch, int64_t idx) {
            if (max_batches >= 0 && idx >= max_batches) return false;
            Metrics m = call_trial(
                [&] { return fmt::format("evaluate_batch (validation batch {})", idx); },
                [&] {
                  const util::CrashScope crash_scope("in evaluate_batch", "validation batch", idx);
                  const AutocastRegion autocast = context_->autocast(true);
                  return trial_->evaluate_batch(batch, idx);
                });
            const int64_t records = call_trial(
                [&] { return fmt::format("get_batch_length (validation batch {})", idx); },
                [&] { return trial_->get_batch_length(batch); });
            if (records < 1) {
              throw TrainingError(fmt::format(
                  "get_batch_length returned {} for validation batch {}; it counts the records "
                  "of a batch (at least 1), which weigh its metrics in their average",
                  records, idx));
            }
            acc.add(m, records, idx);
            return true;
          });
      values = dist.size() == 1
                   ? acc.result()
                   : metrics::combine_partials(dist.allgather_object(acc.partial()), reducer);
    }
    reduce_custom(values);
  }
  MetricValues prefixed;
  for (const auto& [k, v] : values) {
    const std::string prefix = "validation_";
    const std::string name = k.rfind(prefix, 0) == 0 ? k : prefix + k;
    if (prefixed.count(name) != 0) {
      throw TrainingError(
          fmt::format("the validation metrics '{}' and '{}' are both reported as '{}'; rename one",
                      name.substr(prefix.size()), name, name));
    }
    prefixed[name] = v;
  }
  return prefixed;
}

}  // namespace crucible::train
