#include "report/experiment_report.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>

#include <fmt/format.h>

#include <crucible/config.h>
#include <crucible/errors.h>

#include "config/enum_names.h"
#include "metrics/metric_name.h"
#include "metrics/report.h"
#include "report/chart.h"
#include "report/fields.h"
#include "report/html.h"
#include "report/run_report.h"
#include "search/scheduler.h"
#include "search/space.h"
#include "search/summary.h"
#include "search/trial_process.h"
#include "train/run_dir.h"
#include "util/file_lock.h"
#include "util/file_system.h"
#include "util/json_lines.h"

namespace crucible::report {
namespace {

using nlohmann::json;

struct Validation {
  int64_t length = 0;
  double metric = 0;
  std::optional<int64_t> bracket, rung;
  std::optional<search::AshaDecision> decision;  // nullopt: none the searcher spells
};

// One trial as the experiment's rows tell it.
struct Trial {
  int64_t id = 0;
  json hparams = json::object();
  search::TrialState state = search::TrialState::kRunning;
  int64_t length = 0;
  std::optional<double> best;
  std::string error;
  int64_t restarts = 0;
  std::vector<Validation> validations;
  // A running trial's own run so far (its metrics.jsonl): the furthest it reported, in the
  // searcher's unit, and its best searcher metric.
  std::optional<double> reached, best_so_far;
};

// Fills in what running trial `t`'s run, `run_dir`, has reported so far, when it has begun.
void add_progress(Trial& t, const std::string& run_dir, const SearcherConfig& searcher,
                  const char* unit) {
  const std::string path = train::RunDir{run_dir}.metrics_file();
  if (!util::exists(path)) return;
  for (const json& row : util::read_json_lines(path, kDamageHint, true).rows) {
    const double reached = number_in(row, unit);
    if (!std::isnan(reached)) t.reached = std::max(t.reached.value_or(0), reached);
    if (metrics::kind_of(row) != metrics::ReportKind::kValidation) continue;
    const std::optional<double> m =
        metrics::find_validation_metric(metrics_in(row), searcher.metric);
    if (m && !std::isnan(*m) &&
        (!t.best_so_far || better(*m, *t.best_so_far, searcher.smaller_is_better))) {
      t.best_so_far = m;
    }
  }
}

std::map<int64_t, Trial> trials_of(const std::vector<json>& rows, bool smaller_is_better) {
  std::map<int64_t, Trial> trials;
  for (const json& row : rows) {
    const std::optional<int64_t> id = integer_in(row, "trial");
    if (!id) continue;
    Trial& t = trials[*id];
    t.id = *id;
    const std::optional<search::TrialEvent> event = search::event_of(row);
    if (row.contains("hparams") && row["hparams"].is_object()) t.hparams = row["hparams"];
    if (event == search::TrialEvent::kValidated) {
      Validation v;
      v.length = integer_in(row, "length").value_or(0);
      v.metric = number_in(row, "metric");
      v.bracket = integer_in(row, "bracket");
      v.rung = integer_in(row, "rung");
      v.decision = search::decision_names().parse(text_in(row, "decision"));
      t.length = std::max(t.length, v.length);
      // The trial's best of all its validations, as the search ranks it (logs before that was
      // recorded hold the segment's metric only).
      for (const double m :
           {v.metric, row.contains("best_metric") ? number_in(row, "best_metric") : v.metric}) {
        if (!t.best || better(m, *t.best, smaller_is_better)) t.best = m;
      }
      t.validations.push_back(v);
    } else if (event == search::TrialEvent::kRestarted) {
      if (search::uses_a_restart(row)) ++t.restarts;
    } else if (const auto ended = event ? search::state_after(*event) : std::nullopt) {
      t.state = *ended;
      t.error = text_in(row, "error");
    }
  }
  return trials;
}

// How the searcher ended trial `t`, "" unless it stopped it: the rung of the validation that
// decided it, which the trial's own run cannot tell from a complete segment.
std::string searcher_ending(const Trial& t, const std::string& metric, const std::string& unit) {
  if (t.state != search::TrialState::kStopped) return "";
  for (auto v = t.validations.rbegin(); v != t.validations.rend(); ++v) {
    if (v->decision != search::AshaDecision::kStop) continue;
    return fmt::format(
        "stopped by the searcher at {}{} {} ({} {} there): ASHA continues only the best of each "
        "rung",
        v->rung ? fmt::format("rung {}, after ", *v->rung) : std::string(), v->length, unit, metric,
        number_text(v->metric));
  }
  return fmt::format("stopped by the searcher after {} {}", t.length, unit);
}

// How many trials the search creates, those that its searcher replaces not counted (a grid's
// points, else max_trials); nullopt when a grid cannot be planned.
std::optional<int64_t> trial_budget(const ExperimentConfig& config) {
  if (config.searcher.name != SearcherName::kGrid) return config.searcher.max_trials;
  try {
    return search::Grid(config.hyperparameters).size();
  } catch (const ConfigError&) {
    return std::nullopt;
  }
}

// How the search whose experiment.jsonl in `dir` holds `rows` stands. "complete: every trial
// ended" when its scheduler, replaying them, has nothing left to run (no trial running, none yet
// to create) and the log holds every row it decided (a search stopped while recording its last
// result is not over: its resume records the rest and keeps the experiment's best); "cannot
// tell: <why>" when the replay refuses the log; else how far it is from complete, and whether a
// process searches now (it holds the experiment's lock) or what continues it. A search_failed
// last row is how the search's last process ended (a resume records a "resumed" row once it has
// replayed the log).
std::string how_it_stands(const ExperimentConfig& config, const std::vector<json>& rows,
                          const std::map<int64_t, Trial>& trials, const std::string& dir) {
  const bool failed =
      !rows.empty() && search::event_of(rows.back()) == search::TrialEvent::kSearchFailed;
  const auto failure = [&] {
    return fmt::format("ended by an error (exit code {}): {}",
                       integer_in(rows.back(), "exit_code").value_or(kExitTrainingFailed),
                       text_in(rows.back(), "error"));
  };
  try {
    search::Scheduler scheduler(config);
    const auto unrecorded = scheduler.replay(rows, util::join(dir, "experiment.jsonl"));
    if (unrecorded.empty() && scheduler.running().empty()) {
      // An error after the last trial (keeping the experiment's best) leaves its end undone.
      if (!failed) return "complete: every trial ended";
      return fmt::format("every trial ended, and the search {}; `trainer fit --resume {}` ends it",
                         failure(), dir);
    }
  } catch (const std::exception& e) {
    return fmt::format("cannot tell: {}", e.what());
  }
  int64_t running = 0, invalid = 0, ended = 0;
  for (const auto& [_, t] : trials) {
    running += t.state == search::TrialState::kRunning ? 1 : 0;
    invalid += t.state == search::TrialState::kInvalid ? 1 : 0;
    ended +=
        t.state != search::TrialState::kRunning && t.state != search::TrialState::kInvalid ? 1 : 0;
  }
  // The searcher replaces an invalid trial, up to max_trials of them (a grid point: none).
  ended += invalid - (config.searcher.name == SearcherName::kGrid
                          ? 0
                          : std::min(invalid, config.searcher.max_trials));
  const std::optional<int64_t> budget = trial_budget(config);
  std::string why;
  if (util::FileLock::held_elsewhere(util::join(dir, ".lock"))) {
    why = "searching now: a process holds the experiment's lock";
  } else if (failed) {
    // The same config fails the same way: only a cause outside it, or in a key safe on a
    // search's resume, can be mended in place.
    why = fmt::format(
        "{}. When its cause lies outside the config (the trial library, a file, the machine), "
        "mend it and `trainer fit --resume {}` continues the search (add `--set KEY=VALUE "
        "--allow-safe-changes` for a key that `trainer keys` marks safe); a config that must "
        "change otherwise needs a new experiment: `trainer fit` a corrected copy of {}",
        failure(), dir, util::join(dir, "config.yaml"));
  } else {
    why = fmt::format("stopped or killed; `trainer fit --resume {}` continues it", dir);
  }
  return fmt::format("not finished: {}{} trials ended{} ({})", ended,
                     budget ? fmt::format(" of {}", *budget) : "",
                     running > 0 ? fmt::format(", {} running", running) : "", why);
}

// The trials in the order of the search's closing table (search::summary_table): those that
// validated, best first (NaN last), then the others by id.
std::vector<const Trial*> ranked(const std::map<int64_t, Trial>& trials, bool smaller_is_better) {
  std::vector<const Trial*> out;
  for (const auto& [_, t] : trials) out.push_back(&t);
  std::stable_sort(out.begin(), out.end(), [&](const Trial* a, const Trial* b) {
    if (a->best.has_value() != b->best.has_value()) return a->best.has_value();
    return a->best && better(*a->best, *b->best, smaller_is_better);
  });
  return out;
}

// The trial with the best metric of the search: the first of `order` when its metric is a number.
const Trial* best_of(const std::vector<const Trial*>& order) {
  const bool found = !order.empty() && order.front()->best && !std::isnan(*order.front()->best);
  return found ? order.front() : nullptr;
}

std::string progress_chart(const std::map<int64_t, Trial>& trials, const Trial* best,
                           const std::string& metric, const std::string& unit) {
  Chart chart;
  chart.title = metric + " of every trial";
  chart.x_label = unit;
  chart.y_label = metric;
  chart.width = 920;
  for (const auto& [id, t] : trials) {
    if (t.validations.empty()) continue;
    ChartSeries s;
    s.name = fmt::format("trial {}", id);
    s.emphasized = &t == best;
    for (const Validation& v : t.validations) {
      s.points.push_back({static_cast<double>(v.length), v.metric,
                          (v.rung ? fmt::format("rung {}: ", *v.rung) : std::string()) +
                              (v.decision ? search::decision_names().name(*v.decision) : "")});
    }
    chart.series.push_back(std::move(s));
  }
  return chart.series.empty() ? "" : svg_chart(chart);
}

std::string hyperparameter_charts(const ExperimentConfig& config,
                                  const std::vector<const Trial*>& order,
                                  const std::string& metric) {
  std::string out;
  for (const auto& [name, spec] : config.hyperparameters) {
    if (spec.type == HyperparameterSpec::Type::kConst) continue;
    ChartSeries s;
    s.name = name;
    s.lines = false;
    for (const Trial* t : order) {
      const auto it = t->hparams.find(name);
      if (!t->best || it == t->hparams.end() || !it->is_number()) continue;
      s.points.push_back({it->get<double>(), *t->best, fmt::format("trial {}", t->id)});
    }
    if (s.points.empty()) continue;
    Chart chart;
    chart.title = fmt::format("best {} by {}", metric, name);
    chart.x_label = name;
    chart.y_label = metric;
    chart.log_x = spec.type == HyperparameterSpec::Type::kLog;
    chart.series.push_back(std::move(s));
    out += svg_chart(chart);
  }
  return out;
}

std::string trial_table(const ExperimentConfig& config, const std::vector<const Trial*>& order,
                        const Trial* best, const std::string& metric, const std::string& unit,
                        const std::function<std::string(int64_t, const TrialEnding&)>& trial_link) {
  std::vector<std::string> names;  // the searched hyperparameters: the constant ones are the
                                   // config's, the same for every trial
  for (const auto& [name, spec] : config.hyperparameters) {
    if (spec.type != HyperparameterSpec::Type::kConst) names.push_back(name);
  }
  Table out;
  out.header = {"trial", "state", metric, unit, "restarts"};
  out.header.insert(out.header.end(), names.begin(), names.end());
  out.header.push_back("error");
  out.numeric = {true, false, true, true, true};
  for (const Trial* t : order) {
    const std::string href = trial_link(t->id, TrialEnding{search::state_names().name(t->state),
                                                           searcher_ending(*t, metric, unit)});
    std::vector<std::string> cells = {
        href.empty() ? std::to_string(t->id) : hyperlink(href, std::to_string(t->id)),
        escape(search::state_names().name(t->state)),
        !t->best && t->best_so_far ? number_text(t->best_so_far) + " so far" : number_text(t->best),
        t->reached ? count_text(*t->reached) + " so far" : std::to_string(t->length),
        std::to_string(t->restarts)};
    for (const std::string& name : names) {
      const auto it = t->hparams.find(name);
      cells.push_back(it == t->hparams.end() ? "-"
                      : it->is_string()      ? escape(it->get<std::string>())
                      : it->is_number()      ? number_text(it->get<double>())
                                             : escape(it->dump()));
    }
    cells.push_back(escape(t->error));
    out.rows.push_back(std::move(cells));
    out.marked.push_back(t == best);
  }
  return element("p", "Sorted by their best " + escape(metric) +
                          "; a trial's id links to its own report.") +
         "\n" + table(out);
}

std::string rung_table(const std::map<int64_t, Trial>& trials, bool smaller_is_better) {
  struct Rung {
    int64_t length = 0;
    int64_t validated = 0, continued = 0, stopped = 0, done = 0;
    std::optional<double> best;
  };
  std::map<std::pair<int64_t, int64_t>, Rung> rungs;  // by (bracket, rung)
  for (const auto& [_, t] : trials) {
    for (const Validation& v : t.validations) {
      if (!v.rung) continue;
      Rung& r = rungs[{v.bracket.value_or(0), *v.rung}];
      r.length = std::max(r.length, v.length);
      ++r.validated;
      r.continued += v.decision == search::AshaDecision::kContinue ? 1 : 0;
      r.stopped += v.decision == search::AshaDecision::kStop ? 1 : 0;
      r.done += v.decision == search::AshaDecision::kDone ? 1 : 0;
      if (!r.best || better(v.metric, *r.best, smaller_is_better)) r.best = v.metric;
    }
  }
  if (rungs.empty()) return "";
  Table t;
  t.header = {"bracket", "rung", "length", "validated", "continued", "stopped", "done", "best"};
  t.numeric.assign(t.header.size(), true);
  for (const auto& [key, r] : rungs) {
    t.rows.push_back({std::to_string(key.first), std::to_string(key.second),
                      std::to_string(r.length), std::to_string(r.validated),
                      std::to_string(r.continued), std::to_string(r.stopped),
                      std::to_string(r.done), number_text(r.best)});
  }
  return element("h2", "Rungs") + "\n" +
         element("p",
                 "Each validation at a rung's length, and what the searcher decided: continue "
                 "to the next rung, stop, or done (the trial reached its last rung or ended).") +
         "\n" + table(t);
}

std::string events(const std::vector<json>& rows, const std::string& metric,
                   const std::string& unit) {
  std::string text;
  for (const json& row : rows) {
    std::string line;
    try {
      line = search::describe_row(row, metric, unit);
    } catch (const std::exception&) {
      line = row.dump();  // not a row this version writes
    }
    const double since = number_in(row, "time") - number_in(rows.front(), "time");
    text += (std::isfinite(since) ? fmt::format("{:>8} ", metrics::duration_text(since))
                                  : std::string(9, ' ')) +
            line + "\n";
  }
  return element("h2", "Events") + "\n" +
         element("p", "experiment.jsonl, each row with the time since the first.") + "\n" +
         preformatted(text);
}

}  // namespace

bool holds_experiment(const std::string& dir) {
  return util::is_regular_file(util::join(dir, "experiment.jsonl"));
}

std::string experiment_page(
    const std::string& dir, const std::string& page_dir,
    const std::function<std::string(int64_t, const TrialEnding&)>& trial_link,
    std::string* status) {
  const std::string config_file = util::join(dir, "config.yaml");
  const ExperimentConfig config = load_experiment_config(config_file);
  const std::string config_text = util::read_file(config_file);
  const std::vector<json> rows =
      util::read_json_lines(util::join(dir, "experiment.jsonl"),
                            "the experiment log is damaged (only a kill's torn last row is "
                            "passed over)")
          .rows;
  const SearcherConfig& searcher = config.searcher;
  const std::string unit = config::names<LengthUnit>().name(search::search_unit(config));
  std::map<int64_t, Trial> trials = trials_of(rows, searcher.smaller_is_better);
  for (auto& [id, t] : trials) {
    if (t.state == search::TrialState::kRunning) {
      add_progress(t, search::TrialFiles(dir, id).run_dir, searcher, unit.c_str());
    }
  }
  const std::vector<const Trial*> order = ranked(trials, searcher.smaller_is_better);

  std::map<std::string, int64_t> states;
  for (const auto& [_, t] : trials) ++states[search::state_names().name(t.state)];
  std::string state_text;
  for (const auto& [state, count] : states) {
    state_text += fmt::format("{}{} {}", state_text.empty() ? "" : ", ", count, state);
  }
  const Trial* best = best_of(order);
  std::string best_text = "-";
  if (best)
    best_text = fmt::format("trial {}: {} {}", best->id, searcher.metric, number_text(*best->best));
  std::string best_checkpoint = "-";
  if (const std::string path = util::join(dir, "best"); util::exists(path)) {
    std::istringstream in(util::read_file(path));
    std::string relative;
    if (std::getline(in, relative) && !relative.empty()) {
      best_checkpoint = hyperlink(relative_path(util::join(dir, relative), page_dir), relative);
    }
  }
  double seconds = 0;
  if (!rows.empty()) seconds = number_in(rows.back(), "time") - number_in(rows.front(), "time");
  std::string files_html;
  for (const char* name : {"config.yaml", "experiment.log", "experiment.jsonl", "trials"}) {
    const std::string path = util::join(dir, name);
    if (util::exists(path)) {
      files_html +=
          (files_html.empty() ? "" : ", ") + hyperlink(relative_path(path, page_dir), name);
    }
  }
  std::string searcher_text =
      fmt::format("{}, metric {} ({} is better)", config::names<SearcherName>().name(searcher.name),
                  searcher.metric, searcher.smaller_is_better ? "smaller" : "larger");
  if (searcher.name != SearcherName::kGrid)
    searcher_text += fmt::format(", max_trials {}", searcher.max_trials);
  const std::string stands = how_it_stands(config, rows, trials, dir);
  if (status != nullptr) *status = stands;
  const std::vector<std::pair<std::string, std::string>> summary = {
      {"experiment directory", escape(dir)},
      {"trial", escape(config.entrypoint)},
      {"searcher", escape(searcher_text)},
      {"trials", escape(state_text.empty() ? "none yet" : state_text)},
      {"how it stands", escape(stands)},
      {"best trial", escape(best_text)},
      {"best checkpoint", best_checkpoint},
      {"time", std::isfinite(seconds) ? escape(metrics::duration_text(seconds)) : "-"},
      {"files", files_html},
  };
  std::string body;
  if (!config.description.empty()) body += element("p", escape(config.description));
  body += facts(summary);
  body += element("h2", "Trials") + "\n";
  body += element("div",
                  progress_chart(trials, best, searcher.metric, unit) +
                      hyperparameter_charts(config, order, searcher.metric),
                  "class=\"charts\"") +
          "\n";
  body += trial_table(config, order, best, searcher.metric, unit, trial_link);
  body += rung_table(trials, searcher.smaller_is_better);
  body += events(rows, searcher.metric, unit);
  body += element("h2", "Config") + "\n" + preformatted(config_text);
  return page(fmt::format("{}: experiment {}", config.name, util::file_name(dir)), body);
}

}  // namespace crucible::report
