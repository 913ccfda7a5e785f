#include "config/schema.h"

#include <algorithm>
#include <cstdint>
#include <sstream>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "config/enum_names.h"
#include "config/hyperparameters.h"
#include "config/yaml_writer.h"

namespace crucible::config {
namespace {

// The member of ExperimentConfig that a key reads and writes.
template <typename T>
using Access = std::function<T&(ExperimentConfig&)>;

template <typename T>
Access<T> member(T ExperimentConfig::*field) {
  return [field](ExperimentConfig& c) -> T& { return c.*field; };
}

template <typename S, typename T>
Access<T> member(S ExperimentConfig::*section, T S::*field) {
  return [section, field](ExperimentConfig& c) -> T& { return (c.*section).*field; };
}

// Emitting only reads the member.
template <typename T>
const T& get(const Access<T>& access, const ExperimentConfig& c) {
  return access(const_cast<ExperimentConfig&>(c));
}

Key make_key(const std::string& path, std::string description) {
  Key key;
  const auto dot = path.find('.');
  key.section = dot == std::string::npos ? "" : path.substr(0, dot);
  key.name = dot == std::string::npos ? path : path.substr(dot + 1);
  key.description = std::move(description);
  key.present = [](const ExperimentConfig&) { return true; };
  return key;
}

Key safe(Key key) {
  key.safe_on_resume = true;
  key.safe_on_search_resume = true;
  return key;
}

// Safe on a run's resume, not on a search's (Key::safe_on_search_resume).
Key safe_for_runs(Key key) {
  key.safe_on_resume = true;
  return key;
}

// Only `searchers` read the key (Key::searchers).
Key read_by(Key key, std::vector<SearcherName> searchers) {
  key.searchers = std::move(searchers);
  key.present = [key](const ExperimentConfig& c) {
    if (!key.present(c)) return false;
    return std::find(key.searchers.begin(), key.searchers.end(), c.searcher.name) !=
               key.searchers.end() ||
           differs_from_default(key, c);
  };
  return key;
}

Key required(Key key) {
  key.required = true;
  return key;
}

template <typename Int>
Key integer(const std::string& path, Access<Int> access, int64_t min_value,
            std::string description) {
  Key key = make_key(path, std::move(description));
  key.read = [access, min_value, name = key.name](const MapReader& r, ExperimentConfig& c) {
    Int& value = access(c);
    value = static_cast<Int>(r.integer(name, static_cast<int64_t>(value), min_value));
  };
  key.emit = [access](YAML::Emitter& out, const ExperimentConfig& c) { out << get(access, c); };
  return key;
}

// A number; with `positive_unit` set it must be > 0 (and at least `least`, when that is above 0)
// and at most 1e12 (so that it converts to an integer count of milli-units or bytes; infinity is
// no timeout or size), and the message names the unit.
Key number(const std::string& path, Access<double> access, std::string positive_unit,
           std::string description, double least = 0) {
  Key key = make_key(path, std::move(description));
  key.read = [access, least, unit = std::move(positive_unit), name = key.name](
                 const MapReader& r, ExperimentConfig& c) {
    double& value = access(c);
    value = r.number(name, value);
    if (!unit.empty() && !(value > 0 && value >= least && value <= 1e12)) {
      r.fail(name, fmt::format("must be a number of {} {} and at most 1e12, got {}", unit,
                               least > 0 ? fmt::format(">= {}", least) : "> 0", value));
    }
  };
  key.emit = [access](YAML::Emitter& out, const ExperimentConfig& c) { out << get(access, c); };
  return key;
}

Key boolean(const std::string& path, Access<bool> access, std::string description) {
  Key key = make_key(path, std::move(description));
  key.read = [access, name = key.name](const MapReader& r, ExperimentConfig& c) {
    access(c) = r.boolean(name, access(c));
  };
  key.emit = [access](YAML::Emitter& out, const ExperimentConfig& c) {
    out << (get(access, c) ? "true" : "false");
  };
  return key;
}

enum class Text {
  kOptional,  // may be empty; the resolved config leaves an empty one out
  kNonEmpty,  // an empty string is an error
};

// A string; `check` returns a message for an invalid value, "" for a valid one.
Key text(const std::string& path, Access<std::string> access, Text rule, std::string description,
         std::function<std::string(const std::string&)> check = nullptr) {
  Key key = make_key(path, std::move(description));
  key.read = [access, rule, check, name = key.name](const MapReader& r, ExperimentConfig& c) {
    std::string& value = access(c);
    value = r.string(name, value);
    if (rule == Text::kNonEmpty && value.empty()) r.fail(name, "must not be empty");
    if (check) {
      const std::string problem = check(value);
      if (!problem.empty()) r.fail(name, problem);
    }
  };
  if (rule == Text::kOptional) {
    key.present = [access](const ExperimentConfig& c) { return !get(access, c).empty(); };
  }
  key.emit = [access](YAML::Emitter& out, const ExperimentConfig& c) {
    emit_string(out, get(access, c));
  };
  return key;
}

template <typename E>
Key enumerated(const std::string& path, Access<E> access, std::string description) {
  Key key = make_key(path, std::move(description));
  key.read = [access, name = key.name](const MapReader& r, ExperimentConfig& c) {
    access(c) = r.enumerated(name, access(c));
  };
  key.emit = [access](YAML::Emitter& out, const ExperimentConfig& c) {
    out << names<E>().name(get(access, c));
  };
  return key;
}

Key length(const std::string& path, Access<Length> access, int64_t min_value,
           std::string description) {
  Key key = make_key(path, std::move(description));
  key.is_length = true;
  key.read = [access, min_value, name = key.name](const MapReader& r, ExperimentConfig& c) {
    access(c) = r.length(name, access(c), min_value);
  };
  key.emit = [access](YAML::Emitter& out, const ExperimentConfig& c) {
    const Length& length = get(access, c);
    out << YAML::Flow << YAML::BeginMap << YAML::Key << names<LengthUnit>().name(length.unit)
        << YAML::Value << length.value << YAML::EndMap;
  };
  return key;
}

// searcher.bracket_rungs: Determined's list of each bracket's rung count, or a number n (0:
// none), which stands for the brackets searcher.mode makes from n rungs.
Key bracket_rungs_key() {
  Key key = make_key("searcher.bracket_rungs",
                     "adaptive_asha: each bracket's rung count, e.g. [3, 2], in place of the "
                     "brackets mode makes (a number n: those mode makes from n rungs); [] = "
                     "computed");
  key.read = [](const MapReader& r, ExperimentConfig& c) {
    const auto check = [&](int64_t rungs, const std::string& what) {
      if (rungs < 1 || rungs > kMostBracketRungs) {
        r.fail("bracket_rungs", fmt::format("{} is {}: a bracket has 1 to {} rungs", what, rungs,
                                            kMostBracketRungs));
      }
    };
    if (!r.has("bracket_rungs")) return;
    const YAML::Node n = r.node("bracket_rungs");
    std::vector<int64_t>& out = c.searcher.bracket_rungs;
    const char* expected =
        "expected a list of each bracket's rung count (e.g. [3, 2]) or a rung count";
    if (n.IsScalar() && classify_scalar(n) != ScalarType::kInt) r.fail("bracket_rungs", expected);
    if (n.IsScalar()) {
      const int64_t rungs = r.integer("bracket_rungs", 0, 0);
      if (rungs == 0) return;
      check(rungs, "the rung count");
      out = mode_brackets(c.searcher.mode, rungs);
      return;
    }
    const nlohmann::json list = yaml_to_json(n, r.source(), r.child_path("bracket_rungs"));
    if (!list.is_array()) r.fail("bracket_rungs", expected);
    out.clear();
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string what = fmt::format("item {}", i + 1);
      if (list[i].is_number_unsigned() &&
          list[i].get<uint64_t>() > static_cast<uint64_t>(kMostBracketRungs)) {
        r.fail("bracket_rungs", fmt::format("{} is {}: a bracket has 1 to {} rungs", what,
                                            list[i].dump(), kMostBracketRungs));
      }
      if (!list[i].is_number_integer()) {
        r.fail("bracket_rungs",
               fmt::format("{} is {}: expected a rung count", what, list[i].dump()));
      }
      check(list[i].get<int64_t>(), what);
      out.push_back(list[i].get<int64_t>());
    }
    std::sort(out.rbegin(), out.rend());
  };
  key.present = [](const ExperimentConfig& c) { return !c.searcher.bracket_rungs.empty(); };
  key.emit = [](YAML::Emitter& out, const ExperimentConfig& c) {
    out << YAML::Flow << c.searcher.bracket_rungs;
  };
  return key;
}

Key experiment_seed_key() {
  Key key = make_key("reproducibility.experiment_seed",
                     "the seed every trial seed derives from; unset: a random or adaptive_asha "
                     "search draws one and records it in its config.yaml, any other run uses 0");
  key.read = [](const MapReader& r, ExperimentConfig& c) {
    if (!r.has("experiment_seed")) return;
    c.reproducibility.experiment_seed = static_cast<uint64_t>(r.integer("experiment_seed", 0, 0));
  };
  key.present = [](const ExperimentConfig& c) {
    return c.reproducibility.experiment_seed.has_value();
  };
  key.emit = [](YAML::Emitter& out, const ExperimentConfig& c) {
    if (c.reproducibility.experiment_seed) {
      out << *c.reproducibility.experiment_seed;
    } else {
      out << YAML::Null;
    }
  };
  return key;
}

std::string check_entrypoint(const std::string& entrypoint) {
  const auto colon = entrypoint.rfind(':');
  if (colon != std::string::npos && colon != 0 && colon + 1 != entrypoint.size()) return "";
  return "expected '<library>:<TrialClass>', e.g. 'fashion_mnist:FashionCNN', got '" + entrypoint +
         "'";
}

Key hyperparameters_key() {
  Key key = make_key("hyperparameters",
                     "name: value; each a constant or a search space {type: "
                     "const|int|double|log|categorical, ...}; global_batch_size is required");
  key.read = [](const MapReader& r, ExperimentConfig& c) {
    c.hyperparameters = read_hyperparameters(r);
  };
  key.emit = [](YAML::Emitter& out, const ExperimentConfig& c) {
    emit_hyperparameters(out, c.hyperparameters);
  };
  return key;
}

Key data_key() {
  Key key = make_key("data", "a free-form mapping for the trial (TrialContext::data_config)");
  key.read = [](const MapReader& r, ExperimentConfig& c) {
    if (!r.has("data")) return;
    if (!r.node("data").IsMap()) r.fail("data", "expected a mapping");
    c.data = yaml_to_json(r.node("data"), r.source(), "data");
  };
  key.emit = [](YAML::Emitter& out, const ExperimentConfig& c) {
    if (c.data.empty()) {
      out << YAML::Flow << YAML::BeginMap << YAML::EndMap;
    } else {
      emit_json(out, c.data);
    }
  };
  return key;
}

// A number that must be >= 0 (or > 0 with `positive`), read from a nested mapping.
double non_negative(const MapReader& r, const std::string& name, double fallback, bool positive) {
  const double value = r.number(name, fallback);
  if (positive ? !(value > 0) : !(value >= 0)) {
    r.fail(name, fmt::format("must be a number {} 0, got {}", positive ? ">" : ">=", value));
  }
  return value;
}

Key gradient_clipping_key() {
  Key key = make_key("optimizations.gradient_clipping",
                     "{max_norm: x, norm_type: 2} clips the total gradient norm, {max_value: x} "
                     "each element, after cross-rank averaging and unscaling; {} = off");
  key.read = [name = key.name](const MapReader& r, ExperimentConfig& c) {
    if (!r.has(name)) return;
    const MapReader clip(r.source(), r.node(name), r.child_path(name),
                         {"max_norm", "norm_type", "max_value"});
    GradientClipping& out = c.optimizations.gradient_clipping;
    if (clip.has("max_norm") && clip.has("max_value")) {
      r.fail(name, "set max_norm (with norm_type) or max_value, not both");
    }
    if (clip.has("norm_type") && !clip.has("max_norm")) {
      clip.fail("norm_type", "applies to max_norm, which is not set");
    }
    if (clip.has("max_norm")) out.max_norm = non_negative(clip, "max_norm", 0, true);
    if (clip.has("norm_type")) {
      out.norm_type = clip.number("norm_type", 2);
      // Below 1 the p-"norm" is no norm: clipping by it would not bound the gradient.
      if (!(out.norm_type >= 1)) {
        clip.fail("norm_type",
                  fmt::format("must be a number >= 1, or .inf, got {}", out.norm_type));
      }
    }
    if (clip.has("max_value")) out.max_value = non_negative(clip, "max_value", 0, true);
  };
  key.emit = [](YAML::Emitter& out, const ExperimentConfig& c) {
    const GradientClipping& clip = c.optimizations.gradient_clipping;
    out << YAML::Flow << YAML::BeginMap;
    if (clip.max_norm > 0) {
      out << YAML::Key << "max_norm" << YAML::Value << clip.max_norm << YAML::Key << "norm_type"
          << YAML::Value << clip.norm_type;
    }
    if (clip.max_value > 0) out << YAML::Key << "max_value" << YAML::Value << clip.max_value;
    out << YAML::EndMap;
  };
  return key;
}

Key early_stopping_key() {
  Key key = make_key("early_stopping",
                     "{metric: m, patience: n, min_delta: x, smaller_is_better: b} stops training "
                     "after n validations in which m did not beat its best by more than x "
                     "(smaller_is_better defaults to searcher's); {} = off");
  key.read = [name = key.name](const MapReader& r, ExperimentConfig& c) {
    EarlyStoppingConfig& out = c.early_stopping;
    out.smaller_is_better = c.searcher.smaller_is_better;  // absent, {} and given alike
    if (!r.has(name)) return;
    const MapReader stop(r.source(), r.node(name), r.child_path(name),
                         {"metric", "smaller_is_better", "patience", "min_delta"});
    if (r.node(name).size() == 0) return;
    out.metric = stop.required_string("metric");
    out.smaller_is_better = stop.boolean("smaller_is_better", out.smaller_is_better);
    out.patience = stop.integer("patience", out.patience, 0);
    out.min_delta = non_negative(stop, "min_delta", out.min_delta, false);
  };
  key.emit = [](YAML::Emitter& out, const ExperimentConfig& c) {
    const EarlyStoppingConfig& stop = c.early_stopping;
    out << YAML::Flow << YAML::BeginMap;
    if (!stop.metric.empty()) {
      out << YAML::Key << "metric" << YAML::Value;
      emit_string(out, stop.metric);
      out << YAML::Key << "smaller_is_better" << YAML::Value
          << (stop.smaller_is_better ? "true" : "false") << YAML::Key << "patience" << YAML::Value
          << stop.patience << YAML::Key << "min_delta" << YAML::Value << stop.min_delta;
    }
    out << YAML::EndMap;
  };
  return key;
}

Key profiling_end_key() {
  Key key = make_key("profiling.end_after_batch",
                     "the last batch index profiled (>= begin_on_batch); null = to the end");
  key.read = [name = key.name](const MapReader& r, ExperimentConfig& c) {
    ProfilingConfig& out = c.profiling;
    if (!r.has(name) || r.node(name).IsNull()) return;
    out.end_after_batch = r.integer(name, out.end_after_batch, 0);
    if (out.end_after_batch < out.begin_on_batch) {
      r.fail(name, fmt::format("must be >= begin_on_batch ({}), got {}", out.begin_on_batch,
                               out.end_after_batch));
    }
  };
  key.emit = [](YAML::Emitter& out, const ExperimentConfig& c) {
    if (c.profiling.end_after_batch < 0) {
      out << YAML::Null;
    } else {
      out << c.profiling.end_after_batch;
    }
  };
  return key;
}

Key profiling_trace_key() {
  Key key =
      boolean("profiling.trace", member(&ExperimentConfig::profiling, &ProfilingConfig::trace),
              "the chief also writes LibTorch's operator trace of the profiled batches to "
              "profiling/trace.json (Chrome trace format); needs end_after_batch");
  key.read = [read = key.read, name = key.name](const MapReader& r, ExperimentConfig& c) {
    read(r, c);
    if (c.profiling.trace && !c.profiling.enabled) {
      r.fail(name, "needs profiling.enabled: true (the trace is of the profiled batches)");
    }
    if (c.profiling.trace && c.profiling.end_after_batch < 0) {
      r.fail(name,
             "needs profiling.end_after_batch: the trace of every profiled batch is held in "
             "memory until the last one");
    }
  };
  return safe(key);
}

std::vector<Key> build_schema() {
  using C = ExperimentConfig;
  return {
      required(text("name", member(&C::name), Text::kNonEmpty,
                    "the experiment's name (a directory under host_path holds its runs)",
                    [](const std::string& v) -> std::string {
                      // "team/mnist" nests; "..", "/x" or "a//b" would leave host_path.
                      std::istringstream parts(v + "/");
                      for (std::string part; std::getline(parts, part, '/');) {
                        if (part.empty() || part == "." || part == "..") {
                          return "its runs go into <host_path>/<name>/: no empty, '.' or '..' "
                                 "part, no leading or trailing '/'";
                        }
                      }
                      return "";
                    })),
      safe(text("description", member(&C::description), Text::kOptional, "free text")),
      required(text("entrypoint", member(&C::entrypoint), Text::kNonEmpty,
                    "<library>:<TrialClass>; the library is looked up as README describes",
                    check_entrypoint)),
      required(hyperparameters_key()),
      enumerated("searcher.name", member(&C::searcher, &SearcherConfig::name),
                 "single (one trial) | grid (a trial per point of the hyperparameters' grid) | "
                 "random (max_trials random draws) | adaptive_asha (random draws, the worst "
                 "stopped at each rung)"),
      text("searcher.metric", member(&C::searcher, &SearcherConfig::metric), Text::kNonEmpty,
           "the validation metric that ranks checkpoints (a run's resume may rename it while "
           "the run has no best value of it)"),
      boolean("searcher.smaller_is_better",
              member(&C::searcher, &SearcherConfig::smaller_is_better),
              "whether a smaller searcher.metric is better (a run's resume may change it while the "
              "run has no best value)"),
      read_by(integer("searcher.max_trials", member(&C::searcher, &SearcherConfig::max_trials), 1,
                      "how many trials a search runs"),
              {SearcherName::kRandom, SearcherName::kAdaptiveAsha}),
      read_by(integer("searcher.max_concurrent_trials",
                      member(&C::searcher, &SearcherConfig::max_concurrent_trials), 0,
                      "trials a search runs at once; 0 = no limit"),
              {SearcherName::kGrid, SearcherName::kRandom, SearcherName::kAdaptiveAsha}),
      read_by(enumerated("searcher.mode", member(&C::searcher, &SearcherConfig::mode),
                         "adaptive_asha's brackets: aggressive | standard | conservative"),
              {SearcherName::kAdaptiveAsha}),
      read_by(integer("searcher.divisor", member(&C::searcher, &SearcherConfig::divisor), 2,
                      "adaptive_asha: each rung keeps the top 1/divisor of its trials"),
              {SearcherName::kAdaptiveAsha}),
      read_by(integer("searcher.max_rungs", member(&C::searcher, &SearcherConfig::max_rungs), 1,
                      "adaptive_asha: the most rungs a bracket has"),
              {SearcherName::kAdaptiveAsha}),
      read_by(bracket_rungs_key(), {SearcherName::kAdaptiveAsha}),
      integer(
          "searcher.max_time", member(&C::searcher, &SearcherConfig::max_time), 0,
          "adaptive_asha: a trial's length in units of time_metric; 0 = searcher.max_length, else "
          "max_length (also the top-level max_length when that and searcher.max_length are "
          "absent)"),
      text("searcher.time_metric", member(&C::searcher, &SearcherConfig::time_metric),
           Text::kOptional, "adaptive_asha: what max_time counts (batches, records, epochs)"),
      length("searcher.max_length", member(&C::searcher, &SearcherConfig::max_length), 0,
             "a trial's length, Determined's older form of max_time (also the top-level max_length "
             "when that is absent); 0 = unset"),
      text("searcher.source_trial_id", member(&C::searcher, &SearcherConfig::source_trial_id),
           Text::kOptional,
           "warm start: a run directory (a trial's trials/<id>) whose newest good checkpoint's "
           "model weights start a new run or every trial"),
      text("searcher.source_checkpoint_uuid",
           member(&C::searcher, &SearcherConfig::source_checkpoint_uuid), Text::kOptional,
           "warm start: a checkpoint directory whose model weights start a new run or every "
           "trial"),
      safe_for_runs(
          required(length("max_length", member(&C::max_length), 1,
                          "how long to train: {batches|epochs|records: n} (or Determined's "
                          "searcher.max_time with searcher.time_metric)"))),
      integer("records_per_epoch", member(&C::records_per_epoch), 0,
              "records in an epoch; 0 = the training loader's size"),
      safe(length("min_validation_period", member(&C::min_validation_period), 0,
                  "validate at least this often; 0 = never (training always ends validated)")),
      safe(length("min_checkpoint_period", member(&C::min_checkpoint_period), 0,
                  "checkpoint at least this often; 0 = never (training always ends "
                  "checkpointed)")),
      boolean("perform_initial_validation", member(&C::perform_initial_validation),
              "validate before the first batch"),
      enumerated("checkpoint_policy", member(&C::checkpoint_policy),
                 "best: after each validation that improves searcher.metric; all: after every "
                 "validation; none: never"),
      text("checkpoint_storage.host_path",
           member(&C::checkpoint_storage, &CheckpointStorageConfig::host_path), Text::kNonEmpty,
           "the folder that holds the run directories; a relative one is relative to the "
           "experiment file's directory"),
      safe(integer("checkpoint_storage.save_trial_best",
                   member(&C::checkpoint_storage, &CheckpointStorageConfig::save_trial_best), 0,
                   "how many of the best checkpoints retention keeps")),
      safe(integer("checkpoint_storage.save_trial_latest",
                   member(&C::checkpoint_storage, &CheckpointStorageConfig::save_trial_latest), 0,
                   "how many of the newest checkpoints retention keeps")),
      safe(integer("checkpoint_storage.save_experiment_best",
                   member(&C::checkpoint_storage, &CheckpointStorageConfig::save_experiment_best),
                   0,
                   "a search: how many of the best checkpoints over all trials its end keeps "
                   "beside each trial's own")),
      integer("resources.slots_per_trial", member(&C::resources, &ResourcesConfig::slots_per_trial),
              1, "processes that train one trial"),
      safe(number("resources.distributed_timeout_seconds",
                  member(&C::resources, &ResourcesConfig::distributed_timeout_seconds), "seconds",
                  "how long a rank waits for the others before it fails (c10d counts whole "
                  "seconds: at least 1)",
                  1)),
      enumerated("resources.distributed_backend",
                 member(&C::resources, &ResourcesConfig::distributed_backend),
                 "the process group for CUDA tensors: auto | gloo | nccl"),
      integer("optimizations.aggregation_frequency",
              member(&C::optimizations, &OptimizationsConfig::aggregation_frequency), 1,
              "batches whose gradients make one optimizer step"),
      boolean("optimizations.average_aggregated_gradients",
              member(&C::optimizations, &OptimizationsConfig::average_aggregated_gradients),
              "divide accumulated gradients by aggregation_frequency"),
      number("optimizations.gradient_bucket_mb",
             member(&C::optimizations, &OptimizationsConfig::gradient_bucket_mb), "MiB",
             "the largest gradient all-reduce bucket, in MiB"),
      safe(boolean("optimizations.gradient_as_bucket_view",
                   member(&C::optimizations, &OptimizationsConfig::gradient_as_bucket_view),
                   "gradients live in the all-reduce buckets (no copies)")),
      enumerated("optimizations.mixed_precision",
                 member(&C::optimizations, &OptimizationsConfig::mixed_precision),
                 "autocast dtype of train_batch and evaluate_batch: none | fp16 (CUDA, with a "
                 "dynamic gradient scaler) | bf16 (CUDA or CPU)"),
      gradient_clipping_key(),
      enumerated("optimizations.non_finite",
                 member(&C::optimizations, &OptimizationsConfig::non_finite),
                 "a non-finite loss or gradient: stop (fail, naming the batch) | skip (skip the "
                 "optimizer step, count it as skipped_steps)"),
      integer("optimizations.max_consecutive_skips",
              member(&C::optimizations, &OptimizationsConfig::max_consecutive_skips), 1,
              "with non_finite: skip, this many skipped steps in a row is an error"),
      experiment_seed_key(),
      early_stopping_key(),
      safe(boolean("profiling.enabled", member(&C::profiling, &ProfilingConfig::enabled),
                   "time the training batches from begin_on_batch to end_after_batch by phase and "
                   "report them, with the chief's CPU, memory, disk and network use, beside the "
                   "training metrics")),
      safe(integer("profiling.begin_on_batch",
                   member(&C::profiling, &ProfilingConfig::begin_on_batch), 0,
                   "the first batch index profiled")),
      safe(profiling_end_key()),
      safe(boolean("profiling.sync_timings", member(&C::profiling, &ProfilingConfig::sync_timings),
                   "on CUDA, a timing ends when the device has done the work queued in it")),
      profiling_trace_key(),
      safe(integer("scheduling_unit", member(&C::scheduling_unit), 1,
                   "batches per training-metric report")),
      safe(integer("max_restarts", member(&C::max_restarts), 0,
                   "a search restarts a failed trial this often from its last checkpoint "
                   "before recording it as failed")),
      data_key(),
  };
}

}  // namespace

const std::vector<Key>& schema() {
  static const std::vector<Key> keys = build_schema();
  return keys;
}

std::vector<std::string> top_level_names() {
  std::vector<std::string> out;
  for (const Key& key : schema()) {
    const std::string& name = key.section.empty() ? key.name : key.section;
    if (std::find(out.begin(), out.end(), name) == out.end()) out.push_back(name);
  }
  return out;
}

std::vector<std::string> section_keys(const std::string& section) {
  std::vector<std::string> out;
  for (const Key& key : schema()) {
    if (key.section == section) out.push_back(key.name);
  }
  return out;
}

bool differs_from_default(const Key& key, const ExperimentConfig& config) {
  YAML::Emitter value, fallback;
  key.emit(value, config);
  key.emit(fallback, ExperimentConfig());
  return std::string(value.c_str()) != fallback.c_str();
}

const Key* find_key(const std::string& path) {
  for (const Key& key : schema()) {
    const std::string p = key.path();
    if (path == p || path.rfind(p + ".", 0) == 0) return &key;
  }
  return nullptr;
}

}  // namespace crucible::config
