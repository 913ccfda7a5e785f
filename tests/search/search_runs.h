#pragma once

// Searches of SearchTrial through the real `trainer fit`, and the rows of their experiment.jsonl.

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "catch.h"
#include "process.h"
#include "search/experiment_log.h"

namespace crucible::testing {

using nlohmann::json;

// An experiment file in `dir` for SearchTrial: 256 records in batches of 16.
inline std::string search_config(const TempDir& dir, const std::string& searcher,
                                 const std::string& hyperparameters,
                                 const std::string& extra = "") {
  const std::string path = dir / "search.yaml";
  write_file(path,
             "name: search\nentrypoint: crucible_test_trials:SearchTrial\n"
             "hyperparameters: {global_batch_size: 16, records: 256, " +
                 hyperparameters + "}\nsearcher: " + searcher +
                 "\nmax_length: {batches: 16}\nscheduling_unit: 4\n"
                 "reproducibility: {experiment_seed: 5}\n" +
                 extra);
  return path;
}

// `env`: variables set for the command, as a shell prefix ("NAME=value ").
inline CommandResult fit(const std::string& config, const std::string& out,
                         const std::string& env = "") {
  return run_command(env + kTrainer + " fit " + config + " --output " + out);
}

// Runs a search of SearchTrial into <tmp>/exp and requires it to succeed; returns its output.
inline std::string search_ok(const TempDir& tmp, const std::string& searcher,
                             const std::string& hyperparameters, const std::string& extra = "") {
  const auto r = fit(search_config(tmp, searcher, hyperparameters, extra), tmp / "exp");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  return r.output;
}

// The rows of experiment.jsonl without their time, which no rerun repeats.
inline std::vector<json> rows_of(const std::string& experiment) {
  std::vector<json> rows = read_metrics(experiment + "/experiment.jsonl");
  for (auto& row : rows) row.erase("time");
  return rows;
}

inline std::vector<json> rows_with(const std::vector<json>& rows, const std::string& event) {
  std::vector<json> out;
  for (const auto& row : rows) {
    if (row["event"] == event) out.push_back(row);
  }
  return out;
}

// The rows a search decides from and about (what a rerun or a resumed run must repeat): not
// the restarts, the errors that ended a run of it, nor its resumes.
inline std::vector<json> decisions(const std::vector<json>& rows) {
  std::vector<json> out;
  for (const auto& row : rows) {
    if (search::is_decision(row)) out.push_back(row);
  }
  return out;
}

inline std::string trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

}  // namespace crucible::testing
