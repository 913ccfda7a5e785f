#include "report/run_report.h"

#include <algorithm>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include <crucible/config.h>
#include <crucible/errors.h>

#include "checkpoint/checkpoint.h"
#include "config/enum_names.h"
#include "metrics/jsonl_sink.h"
#include "metrics/metric_name.h"
#include "report/chart.h"
#include "report/fields.h"
#include "report/html.h"
#include "train/run_dir.h"
#include "train/schedule.h"
#include "train/stop_signals.h"
#include "util/file_lock.h"
#include "util/file_system.h"
#include "util/json_lines.h"

namespace crucible::report {
namespace {

using nlohmann::json;

// What the page shows of a checkpoint.
struct CheckpointRow {
  std::string dir;
  int64_t batches = 0;
  double epochs = 0;
  MetricValues validation;
  uint64_t bytes = 0;
  bool test_mode = false;  // written by `trainer fit --test-mode`
  std::string problem;     // why its metadata could not be read
};

struct Run {
  Run() = default;
  Run(const Run&) = delete;  // `validations` points into `rows`
  Run(Run&&) = default;
  ExperimentConfig config;
  std::string config_text;
  std::vector<json> rows;                // metrics.jsonl
  std::vector<const json*> validations;  // its validation rows
  std::optional<size_t> best;            // the validation with the best searcher metric
  std::vector<json> profiling;           // profiling/metrics.jsonl
  std::vector<CheckpointRow> checkpoints;
  // The last ERROR line of trainer.log written by the run's last process, without its time and
  // level.
  std::string error;
  // How the last process of the run stopped on a signal or a closed console ("received
  // Interrupt: checkpointing at batch 544 and stopping"), if it did.
  std::string signal_stop;
  bool writing = false;  // a process holds the run's lock: it is training now
};

// The searcher metric of a validation's values, NaN when it lacks it.
double searcher_metric(const Run& run, const MetricValues& values) {
  return metrics::find_validation_metric(values, run.config.searcher.metric).value_or(std::nan(""));
}

// The index below `n` whose searcher metric values_of(i) ranks first (the earliest of equal ones),
// or nullopt when none has it as a number.
template <class ValuesOf>
std::optional<size_t> best_index(const Run& run, size_t n, const ValuesOf& values_of) {
  std::optional<size_t> best;
  double best_metric = 0;
  for (size_t i = 0; i < n; ++i) {
    const double v = searcher_metric(run, values_of(i));
    if (!std::isnan(v) &&
        (!best || better(v, best_metric, run.config.searcher.smaller_is_better))) {
      best = i;
      best_metric = v;
    }
  }
  return best;
}

Run read_run(const std::string& dir) {
  const train::RunDir files{dir};
  Run run;
  run.config = load_experiment_config(files.config_file());
  run.config_text = util::read_file(files.config_file());
  run.rows = util::read_json_lines(files.metrics_file(), kDamageHint, true).rows;
  for (const json& row : run.rows) {
    if (metrics::kind_of(row) == metrics::ReportKind::kValidation) run.validations.push_back(&row);
  }
  run.best = best_index(run, run.validations.size(),
                        [&](size_t i) { return metrics_in(*run.validations[i]); });
  run.profiling = util::read_json_lines(files.profiling_metrics_file(), kDamageHint, true).rows;
  for (const std::string& checkpoint_dir : checkpoint::list(dir)) {
    CheckpointRow row;
    row.dir = checkpoint_dir;
    try {
      const checkpoint::Metadata m = checkpoint::metadata(checkpoint_dir);
      row.batches = m.batches;
      row.epochs = m.epochs;
      row.validation = m.validation;
      row.test_mode = m.trainer_state.test_mode;
      for (const auto& [name, file] : m.files.items()) {
        if (file.is_object() && file.contains("size") && file["size"].is_number_unsigned()) {
          row.bytes += file["size"].get<uint64_t>();
        }
      }
    } catch (const checkpoint::DamagedCheckpoint& e) {
      if (!util::exists(checkpoint_dir)) continue;  // removed by the run's retention meanwhile
      row.problem = e.what();
    }
    run.checkpoints.push_back(std::move(row));
  }
  run.writing = util::FileLock::held_elsewhere(util::join(dir, ".lock"));
  std::istringstream log(util::exists(files.log_file()) ? util::read_file(files.log_file()) : "");
  for (std::string line; std::getline(log, line);) {
    const size_t level = line.find(' ');
    if (level == std::string::npos) continue;
    if (line.compare(level, 7, " ERROR ") == 0) run.error = line.substr(level + 7);
    const size_t text = line.find(' ', level + 1);
    if (text == std::string::npos) continue;
    const std::string message = line.substr(text + 1);
    // Each process of the run begins with "new run" or "resuming run" (FitLoop's set_up).
    if (message.rfind("new run ", 0) == 0 || message.rfind("resuming run ", 0) == 0) {
      run.signal_stop.clear();
      run.error.clear();
    }
    if (train::is_signal_stop_line(message)) run.signal_stop = message;
  }
  return run;
}

// "validation_accuracy 0.8611, validation_loss 0.37705".
std::string metric_list(const MetricValues& values) {
  std::string out;
  for (const auto& [name, value] : values) {
    out += (out.empty() ? "" : ", ") + name + " " + number_text(value);
  }
  return out;
}

std::string how_it_ended(const Run& run, const std::string& continue_command) {
  const char* unit = config::names<LengthUnit>().name(run.config.max_length.unit);
  const std::string last_error =
      run.error.empty() ? "" : "; the log's last ERROR line: " + run.error;
  double reached = 0, reached_batches = 0;
  for (const json& row : run.rows) {
    reached = std::max(reached, number_in(row, unit));
    reached_batches = std::max(reached_batches, number_in(row, "batches"));
  }
  // The trainer refuses to continue a run whose checkpoint says test mode.
  if (std::any_of(run.checkpoints.begin(), run.checkpoints.end(),
                  [](const CheckpointRow& c) { return c.test_mode; })) {
    return "a --test-mode run (one training batch and one validation batch), which is never "
           "continued: start a run with `trainer fit CONFIG`" +
           last_error;
  }
  for (const json& row : run.rows) {
    if (metrics::kind_of(row) == metrics::ReportKind::kStopped) {
      return fmt::format("stopped early at {} batches: {}", count_text(number_in(row, "batches")),
                         text_in(row, "reason"));
    }
  }
  const int64_t length = run.config.max_length.value;
  // Training ends after whole batches: a length in records is rounded up to them, as the
  // schedule rounds it.
  double reached_length = reached, target = static_cast<double>(length);
  if (run.config.max_length.unit == LengthUnit::kRecords) {
    train::Schedule schedule;
    schedule.global_batch_size = std::max<int64_t>(1, run.config.global_batch_size());
    reached_length = reached_batches;
    target = static_cast<double>(schedule.to_batches(run.config.max_length));
  }
  if (reached_length >= target) {
    return fmt::format("complete: trained {} {}{}", count_text(reached), unit,
                       reached_length > target
                           ? fmt::format(", past max_length {} (lowered on resume)", length)
                           : "");
  }
  std::optional<int64_t> newest;
  for (const CheckpointRow& c : run.checkpoints) {
    if (c.problem.empty()) newest = std::max(newest.value_or(0), c.batches);
  }
  const std::string progress = fmt::format(
      "{} of {} {} reported, {}", count_text(reached), length, unit,
      newest ? fmt::format("the newest checkpoint at batch {}", *newest) : "no checkpoint yet");
  if (run.writing) return "training now: " + progress + " (a process holds the run's lock)";
  return fmt::format(
      "not finished: {} ({}; `{}` {}){}", progress,
      run.signal_stop.empty() ? "failed, stopped or killed" : "stopped: " + run.signal_stop,
      continue_command,
      newest ? "continues it from its newest checkpoint" : "starts it again from the beginning",
      last_error);
}

std::string hyperparameters_text(const ExperimentConfig& config) {
  json out = json::object();
  for (const auto& [name, spec] : config.hyperparameters) {
    out[name] = spec.type == HyperparameterSpec::Type::kConst
                    ? spec.value
                    : json(std::string("a ") +
                           config::names<HyperparameterSpec::Type>().name(spec.type) + " space");
  }
  return out.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string metric_charts(const Run& run) {
  struct Pair {
    ChartSeries training{"training", {}, true, false};
    ChartSeries validation{"validation", {}, true, false};
  };
  std::map<std::string, Pair> by_key;
  const std::optional<size_t>& best = run.best;
  size_t validation_index = 0;
  for (const json& row : run.rows) {
    const std::optional<metrics::ReportKind> kind = metrics::kind_of(row);
    if (kind != metrics::ReportKind::kTraining && kind != metrics::ReportKind::kValidation) {
      continue;
    }
    const bool is_validation = kind == metrics::ReportKind::kValidation;
    const double batches = number_in(row, "batches");
    const std::string note =
        is_validation && best && *best == validation_index ? "the best validation" : "";
    for (const auto& [name, value] : metrics_in(row)) {
      Pair& pair = by_key[is_validation ? metrics::without_validation_prefix(name) : name];
      (is_validation ? pair.validation : pair.training).points.push_back({batches, value, note});
    }
    if (is_validation) ++validation_index;
  }
  if (by_key.empty()) return element("p", "No metrics reported yet.") + "\n";
  std::vector<std::string> order;
  const std::string first = metrics::without_validation_prefix(run.config.searcher.metric);
  if (by_key.count(first)) order.push_back(first);
  for (const auto& [key, _] : by_key) {
    if (key != first) order.push_back(key);
  }
  std::string out;
  for (const std::string& key : order) {
    Chart chart;
    chart.title = key;
    chart.x_label = "batches";
    chart.y_label = key;
    for (ChartSeries* s : {&by_key[key].training, &by_key[key].validation}) {
      if (!s->points.empty()) chart.series.push_back(std::move(*s));
    }
    out += svg_chart(chart);
  }
  return element("div", out, "class=\"charts\"") + "\n";
}

std::string validation_table(const Run& run) {
  const std::vector<const json*>& validations = run.validations;
  std::set<std::string> names;
  for (const json* row : validations) {
    for (const auto& [name, _] : metrics_in(*row)) names.insert(name);
  }
  if (validations.empty()) return element("p", "No validation yet.") + "\n";
  Table t;
  t.header = {"batches", "epochs"};
  t.header.insert(t.header.end(), names.begin(), names.end());
  t.numeric.assign(t.header.size(), true);
  const std::optional<size_t>& best = run.best;
  for (size_t i = 0; i < validations.size(); ++i) {
    const MetricValues values = metrics_in(*validations[i]);
    std::vector<std::string> cells = {count_text(number_in(*validations[i], "batches")),
                                      number_text(number_in(*validations[i], "epochs"))};
    for (const std::string& name : names) {
      const auto it = values.find(name);
      cells.push_back(it == values.end() ? "-" : number_text(it->second));
    }
    t.rows.push_back(std::move(cells));
    t.marked.push_back(best && *best == i);
  }
  return table(t);
}

std::string checkpoint_table(const Run& run, const std::string& page_dir) {
  if (run.checkpoints.empty()) return element("p", "No checkpoint.") + "\n";
  const std::optional<size_t> best = best_index(
      run, run.checkpoints.size(), [&](size_t i) { return run.checkpoints[i].validation; });
  Table t;
  t.header = {"checkpoint", "batches", "epochs", run.config.searcher.metric, "MB", "note"};
  t.numeric = {false, true, true, true, true, false};
  for (size_t i = 0; i < run.checkpoints.size(); ++i) {
    const CheckpointRow& c = run.checkpoints[i];
    const std::string name = util::file_name(c.dir);
    if (!c.problem.empty()) {
      t.rows.push_back({escape(name), "-", "-", "-", "-", escape("unreadable: " + c.problem)});
    } else {
      const double v = searcher_metric(run, c.validation);
      t.rows.push_back({hyperlink(relative_path(c.dir, page_dir) + "/metadata.json", name),
                        std::to_string(c.batches), number_text(c.epochs),
                        c.validation.empty() ? "-" : number_text(v),
                        fmt::format("{:.2f}", static_cast<double>(c.bytes) / 1e6),
                        best && *best == i ? "best by " + escape(run.config.searcher.metric) : ""});
    }
    t.marked.push_back(best && *best == i);
  }
  return table(t);
}

std::string profiling_section(const Run& run) {
  if (run.profiling.empty()) return "";
  std::map<std::string, ChartSeries> phases, others;
  // Per metric: the sum of its values weighted by the profiled batches each row covers, and of
  // those weights; the largest value (peaks are reported as the largest).
  struct Summary {
    double weighted = 0, weight = 0, largest = -std::numeric_limits<double>::infinity();
  };
  std::map<std::string, Summary> sums;
  std::vector<double> report_ends;  // of the training reports, in order
  for (const json& row : run.rows) {
    if (metrics::kind_of(row) == metrics::ReportKind::kTraining) {
      report_ends.push_back(number_in(row, "batches"));
    }
  }
  const ProfilingConfig& window = run.config.profiling;
  for (const json& row : run.profiling) {
    const double batches = number_in(row, "batches");
    // The row covers the profiled batch indices of its report's period: from the training report
    // before it to `batches` - 1.
    const auto before = std::lower_bound(report_ends.begin(), report_ends.end(), batches);
    const double first = std::max(before == report_ends.begin() ? 0.0 : *std::prev(before),
                                  static_cast<double>(window.begin_on_batch));
    const double last = window.end_after_batch < 0
                            ? batches - 1
                            : std::min(batches - 1, static_cast<double>(window.end_after_batch));
    const double covered = std::max(1.0, last - first + 1);
    for (const auto& [name, value] : metrics_in(row)) {
      const bool is_phase = name.size() > 3 && name.compare(name.size() - 3, 3, "_ms") == 0;
      ChartSeries& s = (is_phase ? phases : others)[name];
      s.name = name;
      s.points.push_back({batches, value, ""});
      if (std::isfinite(value)) {
        Summary& sum = sums[name];
        sum.weighted += value * covered;
        sum.weight += covered;
        sum.largest = std::max(sum.largest, value);
      }
    }
  }
  Chart phase_chart;
  phase_chart.title = "milliseconds per batch, by phase";
  phase_chart.x_label = "batches";
  phase_chart.y_label = "ms";
  phase_chart.width = 700;
  for (auto& [_, s] : phases) phase_chart.series.push_back(std::move(s));
  std::string charts = phase_chart.series.empty() ? "" : svg_chart(phase_chart);
  for (auto& [name, s] : others) {
    const auto [lo, hi] =
        std::minmax_element(s.points.begin(), s.points.end(),
                            [](const ChartPoint& a, const ChartPoint& b) { return a.y < b.y; });
    if (lo->y == hi->y) continue;  // a constant (no network in use, say): the table says it
    Chart c;
    c.title = name;
    c.x_label = "batches";
    c.y_label = name;
    c.series.push_back(std::move(s));
    charts += svg_chart(c);
  }
  Table t;
  t.header = {"metric", "over the profiled batches (mean; a peak's largest)"};
  t.numeric = {false, true};
  for (const auto& [name, sum] : sums) {
    const bool peak = name.find("peak") != std::string::npos;
    t.rows.push_back({escape(name), number_text(peak ? sum.largest : sum.weighted / sum.weight)});
  }
  return element("h2", "Profiling") + "\n" + table(t) + element("div", charts, "class=\"charts\"") +
         "\n";
}

}  // namespace

bool holds_run(const std::string& dir) {
  return train::holds_run_or_experiment(dir) && !util::exists(util::join(dir, "experiment.jsonl"));
}

std::string relative_path(const std::string& path, const std::string& base) {
  const auto parts = [](const std::string& p) {
    std::vector<std::string> out;
    std::istringstream in(util::lexically_normal(util::absolute(p)));
    for (std::string part; std::getline(in, part, '/');) {
      if (!part.empty()) out.push_back(part);
    }
    return out;
  };
  const std::vector<std::string> to = parts(path), from = parts(base);
  size_t common = 0;
  while (common < to.size() && common < from.size() && to[common] == from[common]) ++common;
  std::string out;
  for (size_t i = common; i < from.size(); ++i) out += "../";
  for (size_t i = common; i < to.size(); ++i) out += to[i] + (i + 1 < to.size() ? "/" : "");
  if (out.empty()) return ".";
  if (out.back() == '/') out.pop_back();
  return out;
}

std::string run_page(const std::string& run_dir, const std::string& page_dir, const std::string& up,
                     const std::string& continue_command, const std::string& ended,
                     std::string* status) {
  const Run run = read_run(run_dir);
  const train::RunDir files{run_dir};

  double batches = 0, records = 0, epochs = 0;
  std::optional<MetricValues> last_validation;
  if (!run.validations.empty()) last_validation = metrics_in(*run.validations.back());
  for (const json& row : run.rows) {
    batches = std::max(batches, number_in(row, "batches"));
    records = std::max(records, number_in(row, "records"));
    epochs = std::max(epochs, number_in(row, "epochs"));
  }
  std::string best_text = "-";
  if (run.best) {
    const json& row = *run.validations[*run.best];
    best_text = fmt::format("{} at {} batches", number_text(searcher_metric(run, metrics_in(row))),
                            count_text(number_in(row, "batches")));
  }
  std::string files_html;
  for (const auto& [name, path] :
       std::vector<std::pair<std::string, std::string>>{{"config.yaml", files.config_file()},
                                                        {"trainer.log", files.log_file()},
                                                        {"metrics.jsonl", files.metrics_file()},
                                                        {"tensorboard/", files.tensorboard_dir()},
                                                        {"checkpoints/", files.checkpoints()},
                                                        {"profiling/", files.profiling_dir()}}) {
    if (util::exists(path)) {
      files_html +=
          (files_html.empty() ? "" : ", ") + hyperlink(relative_path(path, page_dir), name);
    }
  }
  const std::string ending =
      !ended.empty()
          ? ended
          : how_it_ended(run, continue_command.empty() ? "trainer fit --resume " + run_dir
                                                       : continue_command);
  if (status != nullptr) *status = ending;
  const std::vector<std::pair<std::string, std::string>> summary = {
      {"run directory", escape(run_dir)},
      {"trial", escape(run.config.entrypoint)},
      {"how it ended", escape(ending)},
      {"trained", fmt::format("{} batches, {} records, {} epochs", count_text(batches),
                              count_text(records), number_text(epochs))},
      {"best " + run.config.searcher.metric,
       escape(best_text) + (run.config.searcher.smaller_is_better ? " (smaller is better)"
                                                                  : " (larger is better)")},
      {"last validation", last_validation ? escape(metric_list(*last_validation)) : "-"},
      {"hyperparameters", escape(hyperparameters_text(run.config))},
      {"slots", std::to_string(run.config.resources.slots_per_trial)},
      {"files", files_html},
  };
  std::string body = up;
  if (!run.config.description.empty()) body += element("p", escape(run.config.description));
  body += facts(summary);
  body += element("h2", "Metrics") + "\n" + metric_charts(run);
  body += element("h2", "Validations") + "\n" + validation_table(run);
  body += element("h2", "Checkpoints") + "\n" + checkpoint_table(run, page_dir);
  body += profiling_section(run);
  body += element("h2", "Config") + "\n" + preformatted(run.config_text);
  return page(fmt::format("{}: run {}", run.config.name, util::file_name(run_dir)), body);
}

}  // namespace crucible::report
