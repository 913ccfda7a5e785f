// The searcher's state machine: which trials it creates, in which order results are taken, the
// rung decisions, replacements, and replay from its own rows.
#include <set>

#include "catch.h"
#include "search/scheduler.h"
#include "search/space.h"

using crucible::parse_experiment_config;
using crucible::search::Scheduler;
using crucible::search::Segment;
using crucible::search::SegmentResult;
using crucible::search::TrialState;
using nlohmann::json;

namespace {

// A search of 10 batches, unless `searcher` gives its own length (Determined's max_time, or its
// older max_length).
crucible::ExperimentConfig config(const std::string& hyperparameters, const std::string& searcher) {
  const bool own_length = searcher.find("max_length") != std::string::npos ||
                          searcher.find("max_time") != std::string::npos;
  return parse_experiment_config("name: s\nentrypoint: lib:T\nhyperparameters: " + hyperparameters +
                                     "\nsearcher: " + searcher +
                                     (own_length ? "\n" : "\nmax_length: {batches: 10}\n"),
                                 "search.yaml");
}

SegmentResult validated(int64_t trial, int64_t length, double metric) {
  SegmentResult r;
  r.trial = trial;
  r.length = length;
  r.metric = metric;
  return r;
}

std::vector<std::string> events(const std::vector<json>& rows) {
  std::vector<std::string> out;
  for (const auto& r : rows) out.push_back(r["event"].get<std::string>() + " " + r["trial"].dump());
  return out;
}

std::vector<int64_t> trials_of(const std::vector<Segment>& segments) {
  std::vector<int64_t> out;
  for (const auto& s : segments) out.push_back(s.trial);
  return out;
}

}  // namespace

TEST_CASE("grid: every point of the product once, max_concurrent_trials at a time",
          "[search][scheduler]") {
  Scheduler s(
      config("{global_batch_size: 8, lr: {type: double, minval: 0.1, maxval: 0.2, count: "
             "2}, act: {type: categorical, vals: [a, b]}}",
             "{name: grid, metric: loss, max_concurrent_trials: 3}"));
  const auto first = s.start();
  CHECK(events(first) == std::vector<std::string>{"created 1", "created 2", "created 3"});
  CHECK(first[0]["length"] == 10);
  CHECK(trials_of(s.running()) == std::vector<int64_t>{1, 2, 3});
  const auto after_1 = s.report(validated(1, 10, 0.5));
  CHECK(events(after_1) == std::vector<std::string>{"validated 1", "completed 1", "created 4"});
  CHECK(after_1[0]["decision"] == "done");
  // Trial 4 starts when trial 1 ends (virtual time 10) and ends at 20, after 2 and 3.
  CHECK(trials_of(s.running()) == std::vector<int64_t>{2, 3, 4});
  CHECK(s.running().back().ends_at == 20);
  s.report(validated(2, 10, 0.4));
  s.report(validated(3, 10, 0.3));
  CHECK(events(s.report(validated(4, 10, 0.6))) ==
        std::vector<std::string>{"validated 4", "completed 4"});
  CHECK(s.running().empty());
  std::set<std::string> points;
  for (const auto& [id, t] : s.trials()) {
    CHECK(t.state == TrialState::kCompleted);
    points.insert(t.hparams["act"].get<std::string>() + "/" + t.hparams["lr"].dump());
  }
  CHECK(points == std::set<std::string>{"a/0.1", "a/0.2", "b/0.1", "b/0.2"});
  CHECK(s.best_trial() == 3);
}

TEST_CASE("random: max_trials draws that depend on the seed and the trial id alone",
          "[search][scheduler]") {
  const auto c = config(
      "{global_batch_size: 8, lr: {type: log, minval: -4, maxval: -1, base: 10}, units: {type: "
      "int, minval: 4, maxval: 64}}",
      "{name: random, metric: loss, max_trials: 3, max_concurrent_trials: 0}");
  Scheduler a(c), b(c);
  const auto rows_a = a.start();
  const auto rows_b = b.start();
  REQUIRE(rows_a.size() == 3);  // no limit: all at once
  for (size_t i = 0; i < 3; ++i) {
    CHECK(rows_a[i]["hparams"] == rows_b[i]["hparams"]);
    CHECK(rows_a[i]["hparams"] ==
          crucible::search::sample(c.hyperparameters, c.reproducibility.experiment_seed.value_or(0),
                                   static_cast<int64_t>(i) + 1));
  }
  CHECK(rows_a[0]["hparams"] != rows_a[1]["hparams"]);
  CHECK(rows_a[0]["hparams"]["global_batch_size"] == 8);
}

TEST_CASE("adaptive ASHA: the worked example's brackets, rung lengths and stop decisions",
          "[search][scheduler]") {
  Scheduler s(config("{global_batch_size: 8, lr: {type: double, minval: 0.01, maxval: 1}}",
                     "{name: adaptive_asha, metric: loss, max_trials: 16, max_time: 1000, "
                     "time_metric: batches, divisor: 4, mode: standard, max_concurrent_trials: "
                     "16}"));
  const auto first = s.start();
  // Brackets [3, 2] rungs with trials [12, 4] and concurrency [8, 8]: 8 + 4 trials start.
  REQUIRE(first.size() == 12);
  for (size_t i = 0; i < 12; ++i) {
    CHECK(first[i]["bracket"] == (i < 8 ? 0 : 1));
    CHECK(first[i]["length"] == (i < 8 ? 62 : 250));  // rungs [62, 250, 1000] and [250, 1000]
  }
  // Rung 0 of bracket 0 keeps a trial while its place is below max(n / 4, 1).
  const std::vector<double> metrics = {0.5, 0.4, 0.6, 0.3, 0.7, 0.2, 0.45, 0.1};
  const std::vector<std::string> decisions = {"continue", "continue", "stop", "continue",
                                              "stop",     "continue", "stop", "continue"};
  int64_t next_new = 13;
  for (size_t i = 0; i < metrics.size(); ++i) {
    const auto trial = static_cast<int64_t>(i) + 1;
    REQUIRE(s.running().front().trial == trial);
    const auto rows = s.report(validated(trial, 62, metrics[i]));
    INFO("trial " << trial);
    CHECK(rows[0]["event"] == "validated");
    CHECK(rows[0]["rung"] == 0);
    CHECK(rows[0]["decision"] == decisions[i]);
    if (decisions[i] == "stop") {
      // Stopped outright; its slot goes to a new trial of the same bracket.
      CHECK(events(rows) == std::vector<std::string>{"validated " + std::to_string(trial),
                                                     "stopped " + std::to_string(trial),
                                                     "created " + std::to_string(next_new)});
      CHECK(rows[2]["bracket"] == 0);
      ++next_new;
    } else {
      CHECK(rows.size() == 1);
    }
  }
  // The replacements started at virtual time 62 and end at 124, before the continued trials'
  // second segments (62 -> 250) and bracket 1's first ones (0 -> 250).
  const auto order = s.running();
  CHECK(trials_of({order.begin(), order.begin() + 3}) == std::vector<int64_t>{13, 14, 15});
  CHECK(order[0].ends_at == 124);
  CHECK(order[3].trial == 1);
  CHECK(order[3].length == 250);
  CHECK(order[3].ends_at == 250);
  CHECK(s.trials().at(3).state == TrialState::kStopped);
}

TEST_CASE("adaptive ASHA's older form plans records as batches of global_batch_size",
          "[search][scheduler]") {
  // 640 records of 64: T = 10 batches, R = min(5, 2, 3) = 2, brackets [2, 1] with trials
  // [11, 5], rungs [2, 10] and [10], concurrency [8, 8].
  const auto c = config("{global_batch_size: 64, lr: {type: double, minval: 0.01, maxval: 1}}",
                        "{name: adaptive_asha, metric: loss, max_trials: 16, max_length: {records: "
                        "640}}");
  Scheduler s(c);
  CHECK(s.unit() == crucible::LengthUnit::kBatches);
  auto first = s.start();
  REQUIRE(first.size() == 8 + 5);
  for (size_t i = 0; i < first.size(); ++i) {
    INFO("row " << i);
    CHECK(first[i]["bracket"] == (i < 8 ? 0 : 1));
    CHECK(first[i]["length"] == (i < 8 ? 2 : 10));
  }
  // Its log replays; one whose trials were created with other lengths (as planned in records,
  // the first rung 160) does not match.
  Scheduler same(c);
  CHECK(same.replay(first, "experiment.jsonl").empty());
  // Nor does one whose trial was drawn from another space, which the error names.
  auto drawn = first;
  drawn[1]["hparams"]["lr"] = 2.5;
  Scheduler respaced(c);
  CHECK_THROWS_WITH(respaced.replay(drawn, "experiment.jsonl"),
                    Catch::Contains("experiment.jsonl, row 2, does not match this search: it "
                                    "created trial 2 with hyperparameters {\"global_batch_size\":"
                                    "64,\"lr\":2.5}, and this search's space gives it"));
  // Rows read back from experiment.jsonl's text, where an infinite constant is null, replay too.
  const auto unbounded =
      config("{global_batch_size: 64, clip: .inf, lr: {type: log, minval: -3, maxval: -1}}",
             "{name: random, metric: loss, max_trials: 2, max_length: {batches: 10}}");
  Scheduler drawing(unbounded);
  std::vector<nlohmann::json> text_rows;
  for (const auto& row : drawing.start()) text_rows.push_back(nlohmann::json::parse(row.dump()));
  REQUIRE(text_rows[0]["hparams"]["clip"].is_null());
  Scheduler reading(unbounded);
  CHECK(reading.replay(text_rows, "experiment.jsonl").empty());
  first[0]["length"] = 160;
  Scheduler other(c);
  CHECK_THROWS_WITH(other.replay(first, "experiment.jsonl"),
                    Catch::Contains("experiment.jsonl, row 1, does not match this search"));
}

TEST_CASE("adaptive ASHA: a trial reaching the top rung is done, and a failed one ranks last",
          "[search][scheduler]") {
  // max_trials 2, max_time 4, divisor 2, aggressive: one bracket of 2 rungs, lengths [2, 4].
  Scheduler s(config("{global_batch_size: 8, lr: {type: double, minval: 0.01, maxval: 1}}",
                     "{name: adaptive_asha, metric: accuracy, smaller_is_better: false, "
                     "max_trials: 2, max_time: 4, time_metric: batches, divisor: 2, mode: "
                     "aggressive}"));
  CHECK(s.start().size() == 2);
  CHECK(s.report(validated(1, 2, 0.9))[0]["decision"] == "continue");
  SegmentResult failed;
  failed.kind = SegmentResult::Kind::kFailed;
  failed.trial = 2;
  failed.error = "boom";
  const auto rows = s.report(failed);
  CHECK(events(rows) == std::vector<std::string>{"failed 2"});
  CHECK(rows[0]["error"] == "boom");
  CHECK(s.running().front().length == 4);
  CHECK(events(s.report(validated(1, 4, 0.95))) ==
        std::vector<std::string>{"validated 1", "completed 1"});
  CHECK(s.running().empty());
  CHECK(s.best_trial() == 1);
  CHECK(s.trials().at(2).state == TrialState::kFailed);
}

TEST_CASE("an invalid trial is replaced, up to max_trials replacements", "[search][scheduler]") {
  const auto c = config("{global_batch_size: 8, lr: {type: double, minval: 0.01, maxval: 1}}",
                        "{name: random, metric: loss, max_trials: 2, max_concurrent_trials: 1}");
  SegmentResult invalid;
  invalid.kind = SegmentResult::Kind::kInvalid;
  invalid.error = "lr too high";
  Scheduler s(c);
  s.start();
  invalid.trial = 1;
  CHECK(events(s.report(invalid)) == std::vector<std::string>{"invalid 1", "created 2"});
  CHECK(events(s.report(validated(2, 10, 1.0))) ==
        std::vector<std::string>{"validated 2", "completed 2", "created 3"});
  invalid.trial = 3;
  CHECK(events(s.report(invalid)) == std::vector<std::string>{"invalid 3", "created 4"});
  invalid.trial = 4;
  // The third invalid trial is past max_trials replacements: the search ends.
  CHECK(events(s.report(invalid)) == std::vector<std::string>{"invalid 4"});
  CHECK(s.running().empty());
  CHECK(s.trials().at(4).state == TrialState::kInvalid);
}

TEST_CASE("a scheduler fed the results in its rows ends in the same state", "[search][scheduler]") {
  const auto c = config("{global_batch_size: 8, lr: {type: double, minval: 0.01, maxval: 1}}",
                        "{name: adaptive_asha, metric: loss, max_trials: 6, max_time: 16, "
                        "time_metric: batches, divisor: 2, max_concurrent_trials: 2}");
  Scheduler live(c);
  std::vector<json> rows = live.start();
  for (int step = 0; step < 7 && !live.running().empty(); ++step) {
    const Segment next = live.running().front();
    const auto more = live.report(validated(next.trial, next.length, 1.0 / (1 + next.trial)));
    rows.insert(rows.end(), more.begin(), more.end());
  }
  Scheduler replayed(c);
  replayed.start();
  for (const json& row : rows) {
    if (const auto r = Scheduler::result_of_row(row, "experiment.jsonl")) replayed.report(*r);
  }
  REQUIRE(trials_of(replayed.running()) == trials_of(live.running()));
  REQUIRE(replayed.trials().size() == live.trials().size());
  for (const auto& [id, t] : live.trials()) {
    const auto& other = replayed.trials().at(id);
    CHECK(other.hparams == t.hparams);
    CHECK(other.state == t.state);
    CHECK(other.length == t.length);
  }
}
