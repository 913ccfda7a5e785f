#pragma once

// HTML reports of runs and experiments, as `trainer report` writes them.

#include <string>
#include <vector>

#include <torch/arg.h>

namespace crucible {

struct ReportOptions {
  // A run directory (config.yaml, metrics.jsonl, checkpoints/) or an experiment directory
  // (experiment.jsonl, trials/).
  TORCH_ARG(std::string, dir);
  // The page to write; "": <dir>/report.html.
  TORCH_ARG(std::string, output);
};

struct ReportResult {
  std::vector<std::string> pages;  // the pages written, the main one first
  // What the main page says of how the run ended ("how it ended") or how the search stands
  // ("how it stands"), with the command that continues it when one does.
  std::string status;
};

// Writes a report of options.dir(): one self-contained HTML page (charts as inline SVG, no
// scripts, nothing fetched) that opens in any browser, its links to the run's files relative to
// the page. A run's page shows how it ended, its metrics over training, its validations,
// checkpoints, profiling and config. An experiment's page shows the search, every trial's metric
// over its length, the metric against each hyperparameter, the trials ranked, ASHA's rungs and
// the events; each trial's run then gets its own page, trials/<id>/report.html, linked from its
// row. A run or search still running, or killed, is reported as far as its files go. Changes
// nothing in the directory but the pages it writes, each replaced atomically. Returns the pages
// written and how the run or search stands. Throws UsageError when options.dir() holds neither a
// run nor an experiment, when options.output() is a directory, is in a directory that does not
// exist, or is a file of a run or an experiment (such as its metrics.jsonl), ConfigError when its
// config.yaml does not parse, and TrainingError naming the file (and line) that is damaged or
// cannot be written.
ReportResult write_report(const ReportOptions& options);

}  // namespace crucible
