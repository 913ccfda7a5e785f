// The reporting seam: each report reaches every sink; metrics.jsonl holds only deterministic
// values; the log line carries the timing.
#include <fstream>
#include <regex>
#include <sstream>

#include "catch.h"

#include "metrics/jsonl_sink.h"
#include "metrics/log_sink.h"
#include "metrics/sink.h"
#include "process.h"
#include "resumable_run.h"

using crucible::metrics::JsonlSink;
using crucible::metrics::LogSink;
using crucible::metrics::MetricSink;
using crucible::metrics::MetricSinks;
using crucible::metrics::Report;
using crucible::metrics::ReportKind;
using namespace crucible::testing;

namespace {

const std::vector<ReportKind> kRunReports = {ReportKind::kTraining, ReportKind::kValidation,
                                             ReportKind::kStopped};

Report training_report(int64_t batches, double loss, double seconds) {
  Report r;
  r.kind = ReportKind::kTraining;
  r.progress = {batches, batches * 8, batches / 10.0};
  r.values = {{"loss", loss}, {"accuracy", 0.5}};
  r.seconds = seconds;
  r.batches_per_second = 100 / seconds;
  return r;
}

Report validation_report(int64_t batches, double epochs, double seconds) {
  Report r;
  r.kind = ReportKind::kValidation;
  r.progress = {batches, batches * 8, epochs};
  r.values = {{"validation_loss", 0.5}};
  r.seconds = seconds;
  return r;
}

std::vector<nlohmann::json> rows_of(const std::string& path) {
  std::vector<nlohmann::json> rows;
  std::istringstream in(read_file(path));
  for (std::string line; std::getline(in, line);) rows.push_back(nlohmann::json::parse(line));
  return rows;
}

// Keeps what it was given.
struct RecordingSink : MetricSink {
  explicit RecordingSink(std::vector<std::string>* seen, std::string name)
      : seen_(seen), name_(std::move(name)) {}
  void write(const Report& report) override {
    seen_->push_back(name_ + ":" + std::to_string(report.progress.batches));
  }
  std::vector<std::string>* seen_;
  std::string name_;
};

// What a LogSink writes to a log file for `reports`.
std::string logged(const std::vector<Report>& reports) {
  TempDir tmp;
  const std::string log = tmp / "trainer.log";
  {
    crucible::util::Logger logger;
    logger.open(log, /*console=*/false);
    LogSink sink(&logger);
    for (const auto& r : reports) sink.write(r);
  }
  return read_file(log);
}

}  // namespace

TEST_CASE("every sink gets every report, in the order the sinks were added", "[metrics]") {
  std::vector<std::string> seen;
  MetricSinks sinks;
  CHECK(sinks.empty());
  sinks.add(std::make_unique<RecordingSink>(&seen, "a"));
  sinks.add(std::make_unique<RecordingSink>(&seen, "b"));
  sinks.write(training_report(10, 1.0, 2));
  sinks.write(training_report(20, 0.5, 2));
  CHECK(seen == std::vector<std::string>{"a:10", "b:10", "a:20", "b:20"});
}

TEST_CASE("metrics.jsonl rows hold no timing, so equal runs give equal files", "[metrics]") {
  TempDir tmp;
  const std::string fast = tmp / "fast.jsonl", slow = tmp / "slow.jsonl";
  {
    JsonlSink a(fast, kRunReports), b(slow, kRunReports);
    a.write(training_report(10, 1.0, 0.5));
    b.write(training_report(10, 1.0, 7.0));
    a.write(validation_report(12, 1.2, 3));
    b.write(validation_report(12, 1.2, 4));
  }
  CHECK(read_file(fast) == read_file(slow));
  const auto rows = rows_of(fast);
  REQUIRE(rows.size() == 2);
  CHECK(rows[0] == nlohmann::json::parse(R"({"type": "training", "batches": 10, "records": 80,
      "epochs": 1.0, "metrics": {"accuracy": 0.5, "loss": 1.0}})"));
  CHECK(rows[1]["type"] == "validation");
  CHECK(rows[1]["metrics"]["validation_loss"] == 0.5);

  // Resume: a torn last line goes silently; a damaged row with rows after it goes, named, and
  // the rows after it stay.
  const std::string text = read_file(fast);
  const size_t second = text.find('\n') + 1;
  // Damaged: a row cut short (quoted with its invalid UTF-8 byte replaced), a row whose count is
  // not a number, a count past any run's.
  write_file(fast, text.substr(0, second) + "{\"type\": \"vali\xff\n" +
                       "{\"type\": \"training\", \"batches\": \"10\"}\n" +
                       R"({"type": "training", "batches": 18446744073709551615})" + "\n" +
                       text.substr(second) + R"({"type": "training", "batc)");
  std::vector<std::string> warnings;
  const auto warn = [&](const std::string& w) { warnings.push_back(w); };
  crucible::metrics::truncate_metrics_file(fast, 12, warn);
  REQUIRE(warnings.size() == 3);
  CHECK(warnings[0] == fast +
                           ":2: a damaged row (not a JSON object), left out: {\"type\": "
                           "\"vali\xEF\xBF\xBD");
  CHECK(warnings[1] == fast +
                           ":3: a damaged row (its batches is not a whole number), left out: "
                           "{\"type\": \"training\", \"batches\": \"10\"}");
  CHECK_THAT(warnings[2], Catch::Contains(fast + ":4: a damaged row (its batches is not a whole "
                                                 "number), left out"));
  CHECK(rows_of(fast) == rows);
  // Rows past the checkpoint go.
  crucible::metrics::truncate_metrics_file(fast, 10, warn);
  const auto kept = rows_of(fast);
  REQUIRE(kept.size() == 1);
  CHECK(kept[0]["batches"] == 10);
  CHECK(warnings.size() == 3);
}

TEST_CASE("a JSON-lines sink takes only the reports of its kinds", "[metrics]") {
  TempDir tmp;
  const std::string run = tmp / "metrics.jsonl", profile = tmp / "profile.jsonl";
  Report profiling;
  profiling.kind = ReportKind::kProfiling;
  profiling.progress = {20, 160, 2.0};
  profiling.values = {{"batch_ms", 12.5}};
  {
    JsonlSink a(run, kRunReports), b(profile, {ReportKind::kProfiling});
    for (const Report& r :
         {training_report(10, 1.0, 0.5), profiling, validation_report(20, 1.2, 3)}) {
      a.write(r);
      b.write(r);
    }
  }
  const auto run_rows = rows_of(run), profile_rows = rows_of(profile);
  REQUIRE(run_rows.size() == 2);
  CHECK(run_rows[0]["type"] == "training");
  CHECK(run_rows[1]["type"] == "validation");
  REQUIRE(profile_rows.size() == 1);
  CHECK(profile_rows[0] == nlohmann::json::parse(R"({"type": "profiling", "batches": 20,
      "records": 160, "epochs": 2.0, "metrics": {"batch_ms": 12.5}})"));
}

TEST_CASE("a metrics file that cannot be opened is an error naming it", "[metrics]") {
  TempDir tmp;
  CHECK_THROWS_WITH(JsonlSink(tmp / "missing/metrics.jsonl", kRunReports),
                    Catch::Contains("cannot open metrics file " + (tmp / "missing")));
}

TEST_CASE("the log line carries the metrics and the timing", "[metrics]") {
  const std::string text =
      logged({training_report(200, 0.123456, 4), validation_report(200, 2.0, 1.5)});
  CHECK_THAT(text, Catch::Contains("[training  ] batch     200  epoch  20.00  accuracy=0.5 "
                                   "loss=0.12346  (25.0 batches/s)"));
  CHECK_THAT(text, Catch::Contains("[validation] batch     200  epoch   2.00  validation_loss=0.5"
                                   "  (1.5s)"));
}

TEST_CASE("durations read as people write them", "[metrics]") {
  using crucible::metrics::duration_text;
  CHECK(duration_text(0.04) == "0.0s");
  CHECK(duration_text(0.44) == "0.4s");
  CHECK(duration_text(9.9) == "9.9s");
  CHECK(duration_text(42.4) == "42s");
  CHECK(duration_text(725) == "12m 05s");
  CHECK(duration_text(3 * 3600 + 7 * 60 + 29) == "3h 07m");
  CHECK(duration_text(-3) == "0.0s");
}

TEST_CASE("a training line gives the time left when it is known", "[metrics]") {
  Report r = training_report(200, 0.5, 4);
  r.seconds_left = 725;
  CHECK_THAT(logged({r}), Catch::Contains("loss=0.5  (25.0 batches/s, 12m 05s left)"));
}

TEST_CASE("a fit's log estimates the time left and ends with a summary", "[metrics]") {
  TempDir tmp;
  // 128 batches of at least 10 ms in train_batch; 10 checkpoints of at least 50 ms.
  const std::string run =
      finished_resumable_run(tmp, 10, " --set hyperparameters.save_delay_ms=50");
  const std::string log = read_file(run + "/trainer.log");
  // Training lines before max_length (reports every 7 batches, the end at 128) estimate the rest.
  const size_t at = log.find("[training  ] batch     126 ");
  REQUIRE(at != std::string::npos);
  CHECK_THAT(log.substr(at, log.find('\n', at) - at), Catch::EndsWith("s left)"));
  CHECK_THAT(log, Catch::Contains("done: 128 batches; run directory " + run +
                                  "\n"
                                  "  this process: 128 batches in "));
  // The time waiting for data leaves train_batch out; the checkpoints' time is theirs.
  std::smatch times;
  REQUIRE(std::regex_search(log, times,
                            std::regex("waiting for data ([0-9.]+)s, validation ([0-9.]+)s and "
                                       "checkpoints ([0-9.]+)s\n")));
  CHECK(std::stod(times[1]) < 1.0);
  CHECK(std::stod(times[3]) >= 0.5);
  CHECK_THAT(log, Catch::Contains("\n  last validation, at batch 128: validation_loss="));
  CHECK_THAT(log, Catch::Contains("\n  best validation_loss: "));
  CHECK_THAT(log, Catch::Contains("\n  TensorBoard: tensorboard --logdir " + run +
                                  "\n  HTML report: trainer report " + run));
}
