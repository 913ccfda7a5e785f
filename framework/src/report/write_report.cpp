#include <crucible/report.h>

#include <fmt/format.h>

#include <crucible/errors.h>

#include "report/experiment_report.h"
#include "report/html.h"
#include "report/run_report.h"
#include "search/trial_process.h"
#include "train/run_dir.h"
#include "util/file_io.h"
#include "util/file_system.h"

namespace crucible {

ReportResult write_report(const ReportOptions& options) {
  if (options.dir().empty()) {
    throw UsageError("a report needs the directory of a run or an experiment (none was given)");
  }
  const std::string dir = util::lexically_normal(util::absolute(options.dir()));
  if (!util::is_directory(dir)) {
    throw UsageError(fmt::format(
        "{}: {}; a report is made from the directory that training wrote (its --output), of a "
        "run or an experiment",
        dir, util::not_a_directory(dir)));
  }
  const std::string output =
      options.output().empty() ? util::join(dir, "report.html") : options.output();
  if (!options.output().empty()) train::check_output_file(options.output(), "--output");
  const std::string page_dir = util::parent_path(util::absolute(output));
  if (report::holds_experiment(dir)) {
    std::vector<std::pair<std::string, std::string>> pages;  // path, HTML
    const auto trial_link = [&](int64_t id, const report::TrialEnding& ending) -> std::string {
      const std::string run_dir = search::TrialFiles(dir, id).run_dir;
      if (!report::holds_run(run_dir)) return "";
      const std::string path = util::join(run_dir, "report.html");
      const std::string up = report::element(
          "p", fmt::format("Trial {} of {}: {}.", id,
                           report::hyperlink(report::relative_path(output, run_dir),
                                             "the experiment " + util::file_name(dir)),
                           report::escape(ending.state)));
      pages.emplace_back(path, report::run_page(run_dir, run_dir, up, "trainer fit --resume " + dir,
                                                ending.searcher));
      return report::relative_path(path, page_dir);
    };
    ReportResult result;
    const std::string html = report::experiment_page(dir, page_dir, trial_link, &result.status);
    util::replace_atomically(output, html);
    result.pages = {output};
    for (const auto& [path, page] : pages) {
      util::replace_atomically(path, page);
      result.pages.push_back(path);
    }
    return result;
  }
  if (report::holds_run(dir)) {
    ReportResult result;
    util::replace_atomically(output, report::run_page(dir, page_dir, "", "", "", &result.status));
    result.pages = {output};
    return result;
  }
  // Only an experiment.jsonl that is no file (an experiment's is read above) leaves no reason.
  const std::string reason = train::not_a_run_reason(dir);
  throw UsageError(fmt::format("{} holds no run or experiment: {}", dir,
                               reason.empty() ? "its experiment.jsonl is not a file" : reason));
}

}  // namespace crucible
