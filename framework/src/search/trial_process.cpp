#include "search/trial_process.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <system_error>

#include <fmt/format.h>

#include <crucible/errors.h>
#include <crucible/metrics.h>

#include "checkpoint/checkpoint.h"
#include "config/diff.h"
#include "config/enum_names.h"
#include "metrics/jsonl_sink.h"
#include "metrics/metric_name.h"
#include "util/error_text.h"
#include "util/file_io.h"
#include "util/file_system.h"
#include "util/json_number.h"

namespace crucible::search {

TrialFiles::TrialFiles(const std::string& experiment, int64_t id) {
  const std::string trials = util::join(experiment, "trials");
  run_dir = util::join(trials, std::to_string(id));
  config_file = run_dir + ".yaml";
  log_file = run_dir + ".log";
}

ExperimentConfig trial_config(const ExperimentConfig& experiment, const nlohmann::json& hparams,
                              const Length& length) {
  ExperimentConfig c = experiment;
  c.hyperparameters.clear();
  for (const auto& [name, value] : hparams.items()) {
    HyperparameterSpec spec;
    spec.value = value;
    c.hyperparameters[name] = spec;
  }
  SearcherConfig single;
  single.metric = experiment.searcher.metric;
  single.smaller_is_better = experiment.searcher.smaller_is_better;
  single.source_trial_id = experiment.searcher.source_trial_id;
  single.source_checkpoint_uuid = experiment.searcher.source_checkpoint_uuid;
  c.searcher = single;
  c.max_length = length;
  return c;
}

namespace {

// The --set texts that give a run's config.yaml (`run_config`) the values of `wanted` in the keys
// that differ and are safe on a search's resume; none when that file cannot be read (the run's
// resume names it).
std::vector<std::string> carried_changes(const std::string& run_config,
                                         const ExperimentConfig& wanted) {
  try {
    const auto changes = config::diff(load_experiment_config(run_config), wanted);
    return config::overrides_for(changes, wanted, config::is_safe_search_change);
  } catch (const std::exception&) {
    return {};
  }
}

}  // namespace

std::vector<std::string> segment_command(const std::string& trainer, const TrialFiles& files,
                                         const ExperimentConfig& experiment,
                                         const TrialRecord& trial, const Length& length) {
  const std::string run_config = util::join(files.run_dir, "config.yaml");
  if (util::exists(run_config) && !checkpoint::list(files.run_dir).empty()) {
    std::vector<std::string> command = {
        trainer,
        "fit",
        "--resume",
        files.run_dir,
        "--set",
        fmt::format("max_length.{}={}", config::names<LengthUnit>().name(length.unit),
                    length.value),
        "--allow-safe-changes",
        "--quiet"};
    for (std::string& change :
         carried_changes(run_config, trial_config(experiment, trial.hparams, length))) {
      command.insert(command.end(), {"--set", std::move(change)});
    }
    return command;
  }
  if (util::exists(files.run_dir)) util::remove_all(files.run_dir);
  util::replace_atomically(files.config_file,
                           to_yaml(trial_config(experiment, trial.hparams, length)));
  return {trainer, "fit", files.config_file, "--output", files.run_dir, "--quiet"};
}

namespace {

// The rows of a metrics.jsonl that are JSON objects, in order; a torn or damaged line is passed
// over.
std::vector<nlohmann::json> object_rows(const std::string& text) {
  std::vector<nlohmann::json> rows;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    nlohmann::json row = nlohmann::json::parse(line, nullptr, false);
    if (!row.is_discarded() && row.is_object()) rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace

SegmentResult read_segment_result(const TrialFiles& files, int64_t trial, const Length& length,
                                  const std::string& metric, bool smaller_is_better) {
  const std::string path = util::join(files.run_dir, "metrics.jsonl");
  std::string text;
  try {
    text = util::read_file(path);
  } catch (const std::system_error& e) {
    throw TrainingError(
        fmt::format("trial {}: cannot read {}: {}", trial, path, e.code().message()));
  }
  nlohmann::json validation, stopped;
  std::optional<double> best;
  for (const nlohmann::json& row : object_rows(text)) {
    const std::optional<metrics::ReportKind> kind = metrics::kind_of(row);
    if (kind == metrics::ReportKind::kValidation) {
      validation = row;
      const auto metrics = row.find("metrics");
      if (metrics == row.end()) continue;
      const std::optional<double> v =
          metrics::find_validation_metric(util::numbers_from_json(*metrics), metric);
      if (v && !std::isnan(*v) &&
          (!best || rank_key(*v, smaller_is_better) < rank_key(*best, smaller_is_better))) {
        best = *v;
      }
    }
    if (kind == metrics::ReportKind::kStopped) stopped = row;
  }
  if (validation.is_null()) {
    throw TrainingError(fmt::format("trial {}: {} holds no validation", trial, path));
  }
  SegmentResult r;
  r.kind = SegmentResult::Kind::kValidated;
  r.trial = trial;
  const char* unit = config::names<LengthUnit>().name(length.unit);
  MetricValues values;
  try {
    const double trained = validation.at(unit).get<double>();
    if (!(trained >= 0 && trained < 1e15)) throw TrainingError("its length is no count");
    // Whole units reached, as Determined counts them: 0.6 epochs has not reached epoch 1.
    r.length = static_cast<int64_t>(trained);
    const nlohmann::json& metrics = validation.at("metrics");
    if (!metrics.is_object()) throw TrainingError("its metrics are not a mapping");
    values = util::numbers_from_json(metrics);
    if (r.length < length.value) {
      r.ended_early = stopped.is_null() ? "the run ended before its length"
                                        : stopped.value("reason", "the run stopped itself");
    }
  } catch (const std::exception& e) {
    throw TrainingError(
        fmt::format("trial {}: {}: the last validation, {}, is not a row that "
                    "Crucible writes ({})",
                    trial, path, validation.dump(), util::first_line(e)));
  }
  try {
    r.metric = validation_metric(values, metric, "searcher.metric");
  } catch (const TrainingError& e) {
    throw ConfigError(e.what());  // the experiment file names a metric the trial does not report
  }
  r.best = best;
  return r;
}

int64_t reached_length(const TrialFiles& files, LengthUnit unit) {
  std::string text;
  try {
    text = util::read_file(util::join(files.run_dir, "metrics.jsonl"));
  } catch (const std::system_error&) {
    return 0;  // the run failed before it reported anything
  }
  const char* field = config::names<LengthUnit>().name(unit);
  double reached = 0;
  for (const nlohmann::json& row : object_rows(text)) {
    const auto it = row.find(field);
    if (it != row.end() && it->is_number()) reached = std::max(reached, it->get<double>());
  }
  return reached < 1e15 ? static_cast<int64_t>(reached) : 0;
}

std::string last_error(const std::string& log_file) {
  std::ifstream in(log_file);
  std::string error, last;
  bool in_error = false;  // the lines read since the last error line are all indented
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    // A warning (a trial's --quiet leaves them on stderr) is not what ended the process.
    if (line.rfind("warning: ", 0) != 0) last = line;
    if (line.rfind("error: ", 0) == 0) {
      error = line.substr(7);
      in_error = true;
    } else if (in_error && line.rfind("  ", 0) == 0) {
      const size_t text = line.find_first_not_of(' ');
      if (text != std::string::npos) error += " " + line.substr(text);
    } else {
      in_error = false;
    }
  }
  return error.empty() ? last : error;
}

}  // namespace crucible::search
