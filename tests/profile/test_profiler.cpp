// The profiler through the real `trainer`: what `profiling` reports, where, and that it changes
// nothing of the training, across a kill and resume too.
#include <algorithm>
#include <fstream>
#include <limits>
#include <map>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "fault_injection.h"
#include "resumable_run.h"

using namespace crucible::testing;

namespace {

// The profiling rows of `run`, keyed by their "batches".
std::map<int64_t, nlohmann::json> profiling_rows(const std::string& run) {
  std::map<int64_t, nlohmann::json> out;
  for (const auto& row : read_metrics(run + "/profiling/metrics.jsonl")) {
    REQUIRE(row["type"] == "profiling");
    const bool fresh = out.emplace(row["batches"].get<int64_t>(), row["metrics"]).second;
    CHECK(fresh);
  }
  return out;
}

// The number of events of each name in the Chrome trace `file`.
std::map<std::string, int64_t> trace_events(const std::string& file) {
  std::ifstream in(file);
  const auto trace = nlohmann::json::parse(in);
  std::map<std::string, int64_t> out;
  for (const auto& event : trace.is_array() ? trace : trace.at("traceEvents")) {
    ++out[event.value("name", "")];
  }
  return out;
}

}  // namespace

TEST_CASE("a profiled window reports each phase, the system's use and an operator trace",
          "[profile]") {
  // Training reports come after every 7th batch and before the validation at the end of each
  // 32-batch epoch, so the window 10..39, which spans that validation, is reported at 14, 21, 28,
  // 32, 35 and 42; train_batch sleeps 10 ms.
  TempDir tmp;
  const std::string run =
      finished_resumable_run(tmp, 10,
                             " --set profiling.enabled=true --set profiling.begin_on_batch=10"
                             " --set profiling.end_after_batch=39 --set profiling.trace=true");
  const auto rows = profiling_rows(run);
  std::vector<int64_t> batches;
  for (const auto& [b, _] : rows) batches.push_back(b);
  CHECK(batches == std::vector<int64_t>{14, 21, 28, 32, 35, 42});
  for (const auto& [b, m] : rows) {
    INFO("profiling row at batch " << b << ": " << m.dump());
    CHECK(m["train_batch_ms"].get<double>() >= 10.0);
    CHECK(m["batch_ms"].get<double>() >= m["train_batch_ms"].get<double>());
    CHECK(m["backward_ms"].get<double>() > 0.0);
    CHECK(m["step_optimizer_ms"].get<double>() > 0.0);
    CHECK(m["dataloader_next_ms"].get<double>() >= 0.0);
    CHECK_FALSE(m.contains("gradient_sync_ms"));  // one process: nothing to wait for
    CHECK_FALSE(m.contains("batch_ms_slowest_rank"));
    // A row's window may be too short to measure the machine's share (system_usage).
    CHECK(m.value("cpu_percent", 0.0) >= 0.0);
    CHECK(m.value("cpu_percent", 0.0) <= 100.0);
    CHECK(m["process_memory_gb"].get<double>() > 0.0);
    CHECK(m["process_peak_memory_gb"].get<double>() >= m["process_memory_gb"].get<double>());
  }

  bool tensorboard_has_it = false;
  for (const auto& event :
       crucible::metrics::read_event_file(crucible::metrics::event_file_in(run + "/tensorboard"))) {
    for (const auto& s : event.scalars) {
      if (s.tag == "profiling/train_batch_ms" && s.value >= 10.0f) tensorboard_has_it = true;
    }
  }
  CHECK(tensorboard_has_it);

  // The trace holds the 30 training batches and nothing else: train_batch computes one MSE loss,
  // and the 4 validation batches at 32 would add theirs.
  auto events = trace_events(run + "/profiling/trace.json");
  CHECK(events["crucible::batch"] == 30);
  CHECK(events["crucible::train_batch"] == 30);
  CHECK(events["crucible::dataloader_next"] == 30);
  CHECK(events["aten::mse_loss"] == 30);
  CHECK(events["aten::addmm"] >= 60);  // the two linear layers' forward

  const std::string log = read_file(run + "/trainer.log");
  CHECK_THAT(log, Catch::Contains("profile of batches 10..39"));
  CHECK_THAT(log, Catch::Contains("operator trace: " + run + "/profiling/trace.json"));
  // Profiling is kept out of metrics.jsonl, whose rows stay deterministic.
  for (const auto& row : read_metrics(run + "/metrics.jsonl")) CHECK(row["type"] != "profiling");
}

TEST_CASE("a traced window stopped, failed and resumed twice traces each of its batches once",
          "[profile][resume]") {
  // SearchTrial, 96 batches of 16 with a checkpoint every 20 and the trace window 0..79. The
  // first process takes a SIGTERM in batch 58 and stops after it, checkpointing at 59; the second
  // checkpoints at 60 and fails in batch 70; the third runs 60..79 again.
  TempDir tmp;
  const std::string config = tmp / "traced.yaml";
  write_file(config,
             "name: traced\nentrypoint: crucible_test_trials:SearchTrial\n"
             "hyperparameters: {global_batch_size: 16, records: 512, lr: 0.05, "
             "sigterm_at: 58, sigterm_once: " +
                 (tmp / "signalled") + ", fail_at: 70, fail_once: " + (tmp / "failed") +
                 "}\nsearcher: {metric: validation_loss}\nmax_length: {batches: 96}\n"
                 "min_checkpoint_period: {batches: 20}\nscheduling_unit: 5\n"
                 "reproducibility: {experiment_seed: 3}\nprofiling: {enabled: true, "
                 "begin_on_batch: 0, end_after_batch: 79, trace: true}\n");
  const std::string run = tmp / "run";
  const std::string trace = run + "/profiling/trace.json";
  const auto stopped = run_command(kTrainer + " fit " + config + " --quiet --output " + run);
  INFO(stopped.output);
  REQUIRE(stopped.exit_code != 0);
  REQUIRE(trace_events(trace)["crucible::batch"] == 59);
  const auto failed = run_command(kTrainer + " fit --resume " + run + " --quiet");
  INFO(failed.output);
  REQUIRE(failed.exit_code != 0);
  REQUIRE_THAT(failed.output, Catch::Contains("injected failure at batch 70"));
  resume_run(run);

  auto events = trace_events(trace);
  CHECK(events["crucible::batch"] == 80);
  CHECK(events["crucible::dataloader_next"] == 80);
  CHECK(events["crucible::train_batch"] == 80);
  CHECK(events["aten::mse_loss"] == 80);
  CHECK(events["process_name"] == 3);

  // Each process's batches under its own pid, the first batch it traced, in order on the time
  // axis, every operator inside one of them.
  std::ifstream in(trace);
  const auto all = nlohmann::json::parse(in);
  std::map<int64_t, std::string> names;
  std::vector<std::tuple<double, double, int64_t>> batches;  // start, end, pid
  for (const auto& e : all) {
    if (e["name"] == "process_name") names[e["pid"].get<int64_t>()] = e["args"]["name"];
    if (e["name"] == "crucible::batch") {
      const double ts = e["ts"];
      batches.emplace_back(ts, ts + e["dur"].get<double>(), e["pid"].get<int64_t>());
    }
  }
  CHECK(names == std::map<int64_t, std::string>{
                     {0, "batches from 0"}, {59, "batches from 59"}, {60, "batches from 60"}});
  std::sort(batches.begin(), batches.end());
  std::map<int64_t, int64_t> per_process;
  for (size_t i = 0; i < batches.size(); ++i) {
    ++per_process[std::get<2>(batches[i])];
    if (i == 0) continue;
    CHECK(std::get<0>(batches[i]) >= std::get<1>(batches[i - 1]));
    CHECK(std::get<2>(batches[i]) >= std::get<2>(batches[i - 1]));
  }
  CHECK(per_process == std::map<int64_t, int64_t>{{0, 59}, {59, 1}, {60, 20}});
  int64_t outside = 0;
  for (const auto& e : all) {
    if (e["ph"] != "X" || e["name"] == "crucible::batch") continue;
    const double ts = e["ts"];
    const auto in_batch = std::upper_bound(batches.begin(), batches.end(),
                                           std::make_tuple(ts, std::numeric_limits<double>::max(),
                                                           std::numeric_limits<int64_t>::max()));
    if (in_batch == batches.begin() || std::get<2>(*std::prev(in_batch)) != e["pid"] ||
        ts + e["dur"].get<double>() > std::get<1>(*std::prev(in_batch)) + 1e-3) {
      ++outside;
    }
  }
  CHECK(outside == 0);
}

TEST_CASE("a profiled 2-slot run averages the ranks and names the gradient wait and the slowest",
          "[profile][dist]") {
  TempDir tmp;
  const std::string run = finished_resumable_run(tmp, 5, " --slots 2 --set profiling.enabled=true");
  const auto rows = profiling_rows(run);
  REQUIRE(rows.size() >= 10);
  for (const auto& [b, m] : rows) {
    INFO("profiling row at batch " << b << ": " << m.dump());
    CHECK(m["gradient_sync_ms"].get<double>() > 0.0);
    CHECK(m["batch_ms_slowest_rank"].get<double>() >= m["batch_ms"].get<double>());
    CHECK(m["train_batch_ms"].get<double>() >= 5.0);
  }
}

TEST_CASE(
    "profiling changes nothing of the training: a profiled run killed and resumed ends "
    "bitwise identical to an unprofiled one",
    "[profile][resume]") {
  TempDir tmp;
  const std::string reference = finished_resumable_run(tmp);
  REQUIRE_FALSE(crucible::util::exists(reference + "/profiling"));
  const std::string run = tmp / "profiled";
  const std::string fit = kTrainer + " fit " + resumable_config(tmp, 20) +
                          " --set profiling.enabled=true --quiet --output " + run;
  kill_after_report(fit, run, tmp / "log", 84, "batch-0000000080");
  resume_run(run);
  check_same_end(reference, run);

  // One profiling row per training report, none twice: the rows after checkpoint 80 that the
  // killed process wrote are dropped on resume.
  std::vector<int64_t> profiled;
  for (const auto& [b, _] : profiling_rows(run)) profiled.push_back(b);
  CHECK(profiled == batches_of(read_metrics(run + "/metrics.jsonl"), "training"));
}

TEST_CASE(
    "a full disk, an I/O error or a failed look-up in profiling's files: the cause named, the "
    "training ends as if whole",
    "[profile][faults]") {
  TempDir tmp;
  const std::string reference = finished_resumable_run(tmp);
  const std::string config = resumable_config(tmp, 0);
  const auto fit = [&](const std::string& run) {
    return kTrainer + " fit " + config +
           " --set profiling.enabled=true --set profiling.begin_on_batch=10"
           " --set profiling.end_after_batch=39 --set profiling.trace=true --quiet --output " +
           run;
  };
  for (const Fault& fault : {full_disk(), io_error(), stat_error()}) {
    INFO("faults " << fault.kinds);
    const std::string traced = tmp / ("traced-" + fault.kinds.substr(0, fault.kinds.find(',')));
    const auto unfaulted =
        run_command(with_faults(fit(traced), traced, Fault{fault.kinds}, traced + ".trace"));
    INFO(unfaulted.output);
    REQUIRE(unfaulted.exit_code == 0);
    std::vector<TracedCall> calls;
    for (const TracedCall& call : read_trace(traced + ".trace")) {
      if (call.path.find("/profiling") != std::string::npos) calls.push_back(call);
    }
    fault_each_site(
        calls, fault, fault.sticky ? 5 : 1, tmp.path(), [](const std::string&) {}, fit,
        [&](const std::string& run, const CommandResult& r) {
          check_fault_outcome(r, run, fault, run + "/trainer.log");
          // The trace is whole or absent.
          const std::string trace = run + "/profiling/trace.json";
          if (crucible::util::exists(trace)) CHECK_NOTHROW(trace_events(trace));
          CHECK_FALSE(crucible::util::exists(trace + ".tmp"));
          finish_after_fault(reference, run, fit(run));
        });
  }
}

TEST_CASE("a profiling window that begins after the run's last batch is warned of, at its key",
          "[profile]") {
  TempDir tmp;
  const std::string run = tmp / "run";
  const auto r = run_command(kTrainer + " fit " + resumable_config(tmp, 0) +
                             " --set max_length.batches=24 --set profiling.enabled=true"
                             " --set profiling.begin_on_batch=24 --output " +
                             run);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("warning: --set profiling.begin_on_batch=24: "
                                       "profiling.begin_on_batch 24 is past the run's last batch "
                                       "(index 23 of max_length): no batch is profiled"));
  CHECK(profiling_rows(run).empty());
  // The last batch itself is profiled, without a warning.
  const auto last = run_command(kTrainer + " fit " + resumable_config(tmp, 0) +
                                " --set max_length.batches=24 --set profiling.enabled=true"
                                " --set profiling.begin_on_batch=23 --quiet --output " +
                                (tmp / "last"));
  INFO(last.output);
  REQUIRE(last.exit_code == 0);
  CHECK_THAT(last.output, !Catch::Contains("no batch is profiled"));
  CHECK(profiling_rows(tmp / "last").size() == 1);
}
