#pragma once

// Runs of ResumableTrial through the real `trainer`, and comparison of their final state.

#include <csignal>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include <fmt/format.h>
#include <torch/torch.h>

#include "catch.h"

#include "checkpoint/checkpoint.h"
#include "metrics/tensorboard_sink.h"

#include "process.h"

namespace crucible::testing {

// An experiment file of RecordingTrial (the test trials' library) named `name`: 100 records in
// global batches of 8, 20 validation records in batches of 4, the hyperparameters `extra`
// ("key: value, ..."; may be empty) and the top-level keys `rest` (whole lines).
inline std::string recording_yaml(const std::string& name, const std::string& extra,
                                  const std::string& rest) {
  return "name: " + name +
         "\nentrypoint: crucible_test_trials:RecordingTrial\n"
         "hyperparameters: {global_batch_size: 8, records: 100, validation_records: 20, "
         "validation_batch_size: 4" +
         (extra.empty() ? "" : ", " + extra) + "}\n" + rest;
}

// 512 records in batches of 16 (32 per epoch), 4 epochs; checkpoints every 20 batches and after
// every validation; training reports every 7 batches, so reports straddle checkpoints.
inline std::string resumable_config(const TempDir& dir, int64_t sleep_ms,
                                    const std::string& extra = "") {
  const std::string path = dir / "resumable.yaml";
  write_file(path, R"(name: resumable
entrypoint: crucible_test_trials:ResumableTrial
hyperparameters: {global_batch_size: 16, records: 512, hidden: 32, workers: 2, sleep_ms: )" +
                       std::to_string(sleep_ms) + R"(}
searcher: {metric: validation_loss}
max_length: {epochs: 4}
min_validation_period: {epochs: 1}
min_checkpoint_period: {batches: 20}
checkpoint_policy: all
checkpoint_storage: {save_trial_latest: 3, save_trial_best: 1}
scheduling_unit: 7
reproducibility: {experiment_seed: 11}
)" + extra);
  return path;
}

// A temporary directory holding resumable_config(tmp, 0), and where in it a reference run (one
// that met no fault or interruption) goes.
struct ResumableRuns {
  TempDir tmp;
  std::string config = resumable_config(tmp, 0);
  std::string reference = tmp / "reference";
};

// Runs resumable_config(dir, sleep_ms) to its end in `dir`/run with `trainer fit --quiet` and
// `args`, and returns that run directory; fails the calling test when the fit fails.
inline std::string finished_resumable_run(const TempDir& dir, int64_t sleep_ms = 0,
                                          const std::string& args = "") {
  const std::string run = dir / "run";
  const auto fit = run_command(kTrainer + " fit " + resumable_config(dir, sleep_ms) + args +
                               " --quiet --output " + run);
  INFO(fit.output);
  REQUIRE(fit.exit_code == 0);
  return run;
}

// Runs `fit` (a `trainer fit` command writing `run`) with its output in `log`, SIGKILLs it once
// metrics.jsonl holds a training report at or after batch `batches`, and requires that the newest
// checkpoint the kill left is `checkpoint` (a name such as "batch-0000000080").
inline void kill_after_report(const std::string& fit, const std::string& run,
                              const std::string& log, int64_t batches,
                              const std::string& checkpoint) {
  {
    Child child(fit, log);
    REQUIRE(
        wait_until([&] { return last_batches(run + "/metrics.jsonl", "training") >= batches; }));
    child.signal(SIGKILL);
    CHECK(child.wait() == 128 + SIGKILL);
  }
  REQUIRE(crucible::checkpoint::list(run).back() == run + "/checkpoints/" + checkpoint);
}

// Continues `run` to its end with `trainer fit --resume`, requires success, and returns the
// output.
inline std::string resume_run(const std::string& run) {
  const auto resumed = run_command(kTrainer + " fit --resume " + run);
  INFO(resumed.output);
  REQUIRE(resumed.exit_code == 0);
  return resumed.output;
}

// The name of the checkpoint `run/latest` points at ("" when none).
inline std::string latest(const std::string& run) {
  std::string s = read_file(run + "/latest");
  while (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

// The model ResumableTrial builds with hidden = 32.
inline torch::nn::Sequential resumable_model() {
  return torch::nn::Sequential(torch::nn::Linear(8, 32), torch::nn::ReLU(), torch::nn::Dropout(0.2),
                               torch::nn::Linear(32, 1));
}

// The names in `dir` that hold "tfevents" (event files, and what a torn atomic write left).
inline std::vector<std::string> event_files(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& name : util::list_directory(dir)) {
    if (name.find("tfevents") != std::string::npos) names.push_back(name);
  }
  return names;
}

// The TensorBoard scalars of `run`, (step, tag, value) in the order written, without the timing
// and profiling ones (which differ between equal runs).
inline std::vector<std::tuple<int64_t, std::string, float>> tensorboard_scalars(
    const std::string& run) {
  std::vector<std::tuple<int64_t, std::string, float>> out;
  const std::string file = metrics::event_file_in(run + "/tensorboard");
  for (const auto& event : metrics::read_event_file(file)) {
    for (const auto& s : event.scalars) {
      if (s.tag.rfind("timing/", 0) != 0 && s.tag.rfind("profiling/", 0) != 0) {
        out.emplace_back(event.step, s.tag, s.value);
      }
    }
  }
  return out;
}

// Asserts that two finished runs end bitwise identical: every file of the final checkpoint
// (written after `final_batches` batches: weights, optimizer and generator states, trial state),
// every metrics row and every TensorBoard scalar but the timing.
inline void check_same_end(const std::string& reference, const std::string& run,
                           int64_t final_batches = 128) {
  const std::string last = "/checkpoints/batch-" + fmt::format("{:010d}", final_batches) + "/";
  for (const char* file : {"model_0.pt", "model_0.safetensors", "optimizer_0.pt", "optimizer_1.pt",
                           "trial_state.pt"}) {
    INFO(file);
    REQUIRE(util::exists(run + last + file));
    const bool same = read_file(run + last + file) == read_file(reference + last + file);
    CHECK(same);
  }
  auto model = resumable_model();
  torch::optim::Adam adam(model->parameters(), 0.01);
  torch::serialize::InputArchive archive;
  archive.load_from(run + last + "optimizer_0.pt");
  adam.load(archive);
  CHECK(adam.state().size() == 4);  // Adam's moments for each of the 4 parameter tensors
  CHECK(read_file(run + "/metrics.jsonl") == read_file(reference + "/metrics.jsonl"));
  const auto scalars = tensorboard_scalars(run);
  CHECK(scalars.size() >= static_cast<size_t>(final_batches / 7));  // a report every 7 batches
  // One event file: a resume's cut-back leaves no other.
  CHECK(event_files(run + "/tensorboard").size() == 1);
  const bool same_scalars = scalars == tensorboard_scalars(reference);
  CHECK(same_scalars);
}

// Finishes `run`, which a fault stopped (or not), without a fault and requires the end of
// `reference` (check_same_end): `trainer fit --resume` when the run holds config.yaml, else
// `fit`, the command that was to make it, again.
inline void finish_after_fault(const std::string& reference, const std::string& run,
                               const std::string& fit, int64_t final_batches = 128) {
  const bool holds_run = util::exists(run + "/config.yaml");
  const auto again = run_command(holds_run ? kTrainer + " fit --resume " + run + " --quiet" : fit);
  INFO((holds_run ? "resumed: " : "rerun: ") + again.output);
  REQUIRE(again.exit_code == 0);
  check_same_end(reference, run, final_batches);
}

}  // namespace crucible::testing
