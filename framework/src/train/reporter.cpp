#include "train/reporter.h"

#include <cmath>

#include <fmt/format.h>

#include <crucible/errors.h>

#include "config/yaml_reader.h"
#include "metrics/jsonl_sink.h"
#include "metrics/log_sink.h"
#include "metrics/metric_name.h"
#include "metrics/tensorboard_sink.h"
#include "util/file_system.h"
#include "util/json_lines.h"
#include "util/json_number.h"
#include "util/number_text.h"

namespace crucible::train {

void Reporter::open(const RunDir& run, util::Logger* logger) {
  using metrics::ReportKind;
  sinks_.add(std::make_unique<metrics::JsonlSink>(
      run.metrics_file(), std::vector<ReportKind>{ReportKind::kTraining, ReportKind::kValidation,
                                                  ReportKind::kStopped}));
  if (config_.profiling.enabled) {
    util::create_directories(run.profiling_dir());
    sinks_.add(std::make_unique<metrics::JsonlSink>(
        run.profiling_metrics_file(), std::vector<ReportKind>{ReportKind::kProfiling}));
  }
  sinks_.add(std::make_unique<metrics::TensorBoardSink>(run.tensorboard_dir()));
  sinks_.add(std::make_unique<metrics::LogSink>(logger));
}

void Reporter::start_training(int64_t batches) {
  restart_clock();
  started_ = since_;
  started_at_ = batches;
}

void Reporter::report_training(const FitState& state, const metrics::Progress& progress) {
  if (training_.empty()) return;
  const MetricValues values = metrics::across_ranks(dist_, training_);
  const auto now = std::chrono::steady_clock::now();
  const double elapsed = std::chrono::duration<double>(now - since_).count();
  since_ = now;
  std::optional<double> left;
  const int64_t done = progress.batches - started_at_;
  if (!state.test_mode && done > 0 && max_batches_ > progress.batches) {
    left = std::chrono::duration<double>(now - started_).count() / static_cast<double>(done) *
           static_cast<double>(max_batches_ - progress.batches);
  }
  std::optional<double> rate;
  if (trained_since_ > 0) rate = static_cast<double>(trained_since_) / elapsed;
  trained_since_ = 0;
  sinks_.write({metrics::ReportKind::kTraining, progress, values, elapsed, rate, left, ""});
  check_finite(values, state);
  training_.reset();
}

void Reporter::check_training_finite(const FitState& state) const {
  if (training_.empty()) return;
  check_finite(metrics::across_ranks(dist_, training_), state);
}

void Reporter::check_finite(const MetricValues& values, const FitState& state) const {
  if (config_.optimizations.non_finite == NonFinitePolicy::kSkip) return;
  for (const auto& [name, v] : values) {
    if (std::isfinite(v)) continue;
    // The first batch, on any rank, whose value made the mean non-finite.
    int64_t first = -1;
    for (const auto& b : dist_.allgather_object(training_.first_non_finite(name))) {
      const auto batch = b.get<int64_t>();
      if (batch >= 0 && (first < 0 || batch < first)) first = batch;
    }
    const std::string where =
        first >= 0 ? fmt::format("at batch {} (epoch {})", first, first / epoch_len_)
                   : fmt::format("over batches {}..{}", state.batches - training_.batches(),
                                 state.batches - 1);
    throw TrainingError(
        fmt::format("training metric '{}' is {} {} (optimizations.non_finite: stop); stopping. {}",
                    name, util::number_text(v, 6), where, state.last_good_checkpoint()));
  }
}

void Reporter::report_validation(FitState& state, const MetricValues& values, double seconds,
                                 const metrics::Progress& progress) {
  sinks_.write({metrics::ReportKind::kValidation, progress, values, seconds, std::nullopt,
                std::nullopt, ""});
  validation_seconds_ += seconds;
  state.last_validation = values;
  state.validated_at = state.batches;
}

void Reporter::report_profile(const metrics::Progress& progress, const MetricValues& values) {
  sinks_.write(
      {metrics::ReportKind::kProfiling, progress, values, 0, std::nullopt, std::nullopt, ""});
}

void Reporter::report_stop(const metrics::Progress& progress, const std::string& reason) {
  sinks_.write(
      {metrics::ReportKind::kStopped, progress, {}, 0, std::nullopt, std::nullopt, reason});
}

namespace {

// The value of metric `name`, which config key `key` names, among `values`. Throws ConfigError
// naming the file, the key and the metrics present when it is not there.
double configured_metric(const ExperimentConfig& config, const MetricValues& values,
                         const std::string& name, const char* key) {
  const auto found = metrics::find_validation_metric(values, name);
  if (!found) {
    throw ConfigError(fmt::format("{}: {}: '{}' is not among the validation metrics ({}){}",
                                  config::key_place(config, key, name), key, name,
                                  metrics::metric_names(values),
                                  metrics::did_you_mean_metric(name, values)));
  }
  return *found;
}

}  // namespace

void Reporter::check_early_stopping_metric(const MetricValues& values) const {
  const std::string& metric = config_.early_stopping.metric;
  if (!metric.empty()) configured_metric(config_, values, metric, "early_stopping.metric");
}

bool Reporter::record_best(FitState& state) const {
  const double metric =
      configured_metric(config_, state.last_validation, config_.searcher.metric, "searcher.metric");
  const bool smaller = config_.searcher.smaller_is_better;
  // A NaN is no measure: never the best, so that a later validation can be (a checkpoint stores
  // it as null, which a resumed run reads as no best, and does the same).
  const bool best =
      !std::isnan(metric) &&
      (!state.best_metric || (smaller ? metric < *state.best_metric : metric > *state.best_metric));
  if (best) state.best_metric = metric;
  return best;
}

std::optional<double> Reporter::best_in_rows(const std::string& metrics_file,
                                             int64_t batches) const {
  FitState replay;
  const auto rows = util::read_json_lines(metrics_file, "", true).rows;
  for (const nlohmann::json& row : rows) {
    if (metrics::kind_of(row) != metrics::ReportKind::kValidation || !row.contains("metrics") ||
        row.value("batches", int64_t{0}) > batches) {
      continue;
    }
    replay.last_validation = util::numbers_from_json(row["metrics"]);
    try {
      record_best(replay);
    } catch (const ConfigError&) {
      // A validation without the metric ranks nothing.
    }
  }
  return replay.best_metric;
}

std::string Reporter::summary(const FitState& state, const std::string& run_dir) const {
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  const int64_t batches = state.batches - started_at_;
  std::string text = fmt::format(
      "  this process: {} batches in {} ({:.1f} batches/s), of which waiting for data {}, "
      "validation {} and checkpoints {}",
      batches, metrics::duration_text(seconds), seconds > 0 ? batches / seconds : 0.0,
      metrics::duration_text(data_seconds_), metrics::duration_text(validation_seconds_),
      metrics::duration_text(checkpoint_seconds_));
  if (state.validated_at >= 0) {
    text += fmt::format("\n  last validation, at batch {}:", state.validated_at);
    for (const auto& [name, v] : state.last_validation)
      text += fmt::format(" {}={}", name, util::number_text(v, 5));
  }
  if (state.best_metric) {
    text += fmt::format("\n  best {}: {}", config_.searcher.metric,
                        util::number_text(*state.best_metric, 5));
  }
  return text + "\n  TensorBoard: tensorboard --logdir " + run_dir +
         "\n  HTML report: trainer report " + run_dir;
}

}  // namespace crucible::train
