// Ending training early: the non-finite policies, early stopping and a trial's stop request.
#include "catch.h"

#include <cmath>

#include <crucible/crucible.h>

#include "checkpoint/checkpoint.h"
#include "context_fixture.h"
#include "fit_helpers.h"

using namespace crucible::testing;

namespace {

// The rows of a run's metrics.jsonl of type `type`.
std::vector<nlohmann::json> rows_of(const std::string& run, const std::string& type) {
  std::vector<nlohmann::json> out;
  for (const auto& row : read_metrics(run + "/metrics.jsonl")) {
    if (row["type"] == type) out.push_back(row);
  }
  return out;
}

// Whether every parameter of the last checkpoint's model is finite.
bool final_weights_finite(const std::string& run) {
  auto model = torch::nn::Linear(1, 1);
  const auto dirs = crucible::checkpoint::list(run);
  REQUIRE(!dirs.empty());
  crucible::checkpoint::load_weights(dirs.back(), {model.ptr()});
  return torch::isfinite(model->weight).all().item<bool>() &&
         torch::isfinite(model->bias).all().item<bool>();
}

// An archive holding what `saved` wrote, read back as a checkpoint reads it.
void reload(torch::serialize::OutputArchive& saved, torch::serialize::InputArchive& into) {
  std::ostringstream bytes;
  saved.save_to(bytes);
  std::istringstream in(bytes.str());
  into.load_from(in);
}

}  // namespace

TEST_CASE("non_finite: stop names the batch, its epoch and the metric", "[train][non_finite]") {
  TempDir tmp;
  // 13 batches per epoch: batch 17 is in epoch 1. NaN gradients poison the weights, so every
  // later loss is NaN too; the first is named.
  auto config = recording_config("max_length: {batches: 30}\nscheduling_unit: 25\n",
                                 {"hyperparameters.nan_grad_at=17"});
  int code = 0;
  const std::string message = error_of([&] { fit_recording(config, tmp / "run"); }, &code);
  CHECK(code == crucible::kExitTrainingFailed);
  CHECK_THAT(message, Catch::Contains("training metric 'loss' is nan at batch 17 (epoch 1) "
                                      "(optimizations.non_finite: stop)"));
  CHECK_THAT(message, Catch::Contains("No checkpoint was written yet"));
}

TEST_CASE("non_finite: skip skips the step, counts it, and trains on", "[train][non_finite]") {
  TempDir tmp;
  auto config = recording_config(
      "max_length: {batches: 26}\nscheduling_unit: 13\noptimizations: {non_finite: skip}\n",
      {"hyperparameters.nan_grad_at=3", "hyperparameters.step_mode=every_optimizer_step"});
  const auto result = fit_recording(config, tmp / "run");
  CHECK(result.batches_trained == 26);
  const auto training = rows_of(tmp / "run", "training");
  REQUIRE(training.size() == 2);
  CHECK(training[0]["metrics"]["skipped_steps"] == 1.0);
  CHECK(training[1]["metrics"]["skipped_steps"] == 0.0);
  // The loss mean leaves out the NaN of batch 3.
  CHECK(std::isfinite(training[0]["metrics"]["loss"].get<double>()));
  CHECK(final_weights_finite(tmp / "run"));
  // The skipped step did not step the scheduler: 25 steps after 26 batches.
  const auto& calls = RecordingTrial::calls();
  CHECK(calls[4].lr == calls[3].lr);
  CHECK(calls[25].lr == 0.001 * (1.0 / 25));
}

TEST_CASE("non_finite: skip holds a schedule in batches, which counts the skipped batch after",
          "[train][non_finite]") {
  TempDir tmp;
  auto config = recording_config(
      "max_length: {batches: 26}\nscheduling_unit: 13\noptimizations: {non_finite: skip}\n",
      {"hyperparameters.nan_grad_at=3", "hyperparameters.step_mode=every_batch"});
  fit_recording(config, tmp / "run");
  // lr = 0.001 / (1 + batches counted). Batch 3's step is skipped: batch 4 trains at batch 3's
  // rate; its step counts both, so from batch 5 on the rate is the unskipped schedule's.
  const auto& calls = RecordingTrial::calls();
  REQUIRE(calls.size() == 26);
  CHECK(calls[3].lr == Approx(0.001 / 4));
  CHECK(calls[4].lr == calls[3].lr);
  CHECK(calls[5].lr == Approx(0.001 / 6));
  CHECK(calls[25].lr == Approx(0.001 / 26));
}

TEST_CASE("non_finite: skip fails after max_consecutive_skips skips in a row",
          "[train][non_finite]") {
  TempDir tmp;
  auto config = recording_config(R"(max_length: {batches: 30}
min_checkpoint_period: {batches: 5}
optimizations: {non_finite: skip, max_consecutive_skips: 4}
)",
                                 {"hyperparameters.nan_grad_from=7"});
  int code = 0;
  const std::string message = error_of([&] { fit_recording(config, tmp / "run"); }, &code);
  CHECK(code == crucible::kExitTrainingFailed);
  CHECK_THAT(message, Catch::Contains("4 optimizer steps in a row had non-finite gradients, the "
                                      "last at batch 10 (epoch 0); "
                                      "optimizations.max_consecutive_skips is 4") &&
                          Catch::Contains("checkpoints/batch-0000000010"));
  // Checkpoint 10 came after three skipped steps: skipping kept its weights finite.
  CHECK(checkpoint_batches(tmp / "run") == std::vector<int64_t>{5, 10});
  CHECK(final_weights_finite(tmp / "run"));
}

TEST_CASE("early stopping ends training cleanly and says why", "[train][early_stopping]") {
  TempDir tmp;
  // validation_avg_x does not depend on the weights: it never improves on the first validation,
  // so with patience 2 the third validation stops training.
  auto config = recording_config(R"(max_length: {batches: 100}
min_validation_period: {batches: 5}
early_stopping: {metric: avg_x, patience: 2}
)");
  const auto result = fit_recording(config, tmp / "run");
  CHECK(result.batches_trained == 15);
  CHECK_FALSE(result.stopped);
  CHECK_THAT(result.stop_reason, Catch::Contains("early stopping: avg_x did not improve on its "
                                                 "best 12 by more than 0 in 2 validation(s)"));
  CHECK(result.last_checkpoint == tmp / "run/checkpoints/batch-0000000015");
  const auto stopped = rows_of(tmp / "run", "stopped");
  REQUIRE(stopped.size() == 1);
  CHECK(stopped[0]["batches"] == 15);
  CHECK(stopped[0]["reason"] == result.stop_reason);
  CHECK(rows_of(tmp / "run", "validation").size() == 3);
  CHECK_THAT(read_file(tmp / "run/trainer.log"),
             Catch::Contains("stopping at batch 15: early stopping: avg_x"));
}

TEST_CASE("a resumed run keeps early stopping's patience", "[train][early_stopping]") {
  TempDir tmp;
  auto config = recording_config(R"(max_length: {batches: 100}
min_validation_period: {batches: 5}
min_checkpoint_period: {batches: 10}
early_stopping: {metric: validation_avg_x, patience: 2, min_delta: 0.5}
)");
  const auto full = fit_recording(config, tmp / "full");
  REQUIRE(full.batches_trained == 15);
  copy_tree(tmp / "full", tmp / "cut");
  crucible::util::remove_all(tmp / "cut/checkpoints/batch-0000000015");
  // Resumed at batch 10 with one validation without improvement counted: it stops at 15 again
  // (with the count lost it would go on to 25).
  const auto resumed =
      crucible::Trainer(config, crucible::TrialFactory::of<RecordingTrial>("RecordingTrial"))
          .fit(crucible::FitOptions().resume_dir(tmp / "cut").console(false));
  CHECK(resumed.batches_trained == 15);
  CHECK(resumed.stop_reason == full.stop_reason);
  CHECK(read_file(tmp / "cut/checkpoints/batch-0000000015/model_0.pt") ==
        read_file(tmp / "full/checkpoints/batch-0000000015/model_0.pt"));
}

TEST_CASE("a trial's stop request ends training after that batch", "[train][early_stopping]") {
  TempDir tmp;
  auto config = recording_config("max_length: {batches: 40}\n", {"hyperparameters.stop_at=6"});
  const auto result = fit_recording(config, tmp / "run");
  CHECK(result.batches_trained == 7);
  CHECK(result.stop_reason == "stop_at reached");
  CHECK(rows_of(tmp / "run", "validation").back()["batches"] == 7);
  CHECK(checkpoint_batches(tmp / "run") == std::vector<int64_t>{7});
  // The stop is final: a resume (a requeued job's rerun) trains nothing more.
  const std::string rows = read_file(tmp / "run/metrics.jsonl");
  const auto again =
      crucible::Trainer(config, crucible::TrialFactory::of<RecordingTrial>("RecordingTrial"))
          .fit(crucible::FitOptions().resume_dir(tmp / "run").console(false));
  CHECK(again.batches_trained == 7);
  CHECK(again.stop_reason == "stop_at reached");
  CHECK(read_file(tmp / "run/metrics.jsonl") == rows);
  CHECK(checkpoint_batches(tmp / "run") == std::vector<int64_t>{7});
  CHECK_THAT(read_file(tmp / "run/trainer.log"),
             Catch::Contains("the run stopped early at batch 7 (stop_at reached): nothing left "
                             "to train"));
}

TEST_CASE("early stopping on a metric validation does not report names it",
          "[train][early_stopping]") {
  // A config error (exit 2, which ends a search rather than retrying its trial), raised at the
  // first validation with the training so far kept.
  TempDir tmp;
  auto config = recording_config("max_length: {batches: 5}\nearly_stopping: {metric: avg_y}\n");
  int exit_code = 0;
  const std::string message = error_of([&] { fit_recording(config, tmp / "run"); }, &exit_code);
  CHECK(exit_code == 2);
  CHECK_THAT(message, Catch::Contains("early_stopping.metric: 'avg_y' is not among the "
                                      "validation metrics (validation_avg_x, validation_max_x"));
  CHECK_THAT(message, Catch::Contains("(did you mean 'avg_x'?)"));
  CHECK_THAT(message, Catch::Contains("the training so far is in checkpoint"));
  CHECK(checkpoint_batches(tmp / "run") == std::vector<int64_t>{5});
  // The metric given by --set: the error names the override, not the file.
  config = recording_config("max_length: {batches: 5}\n", {"early_stopping.metric=avg_y"});
  CHECK_THAT(error_of([&] { fit_recording(config, tmp / "set"); }),
             Catch::StartsWith("--set early_stopping.metric=avg_y: early_stopping.metric: 'avg_y' "
                               "is not among the validation metrics"));
}

TEST_CASE("a trial callback named early_stopping clashes with the experiment file's",
          "[train][early_stopping]") {
  TempDir tmp;
  auto config = recording_config("max_length: {batches: 5}\nearly_stopping: {metric: avg_x}\n",
                                 {"hyperparameters.callback_name=early_stopping"});
  CHECK_THAT(error_of([&] { fit_recording<CallbackTrial>(config, tmp / "run"); }),
             Catch::Contains("the name 'early_stopping' belongs to the experiment file's "
                             "early_stopping callback"));
}

TEST_CASE(
    "EarlyStopping as a trial builds it: direction, min_delta, patience, its state, and its "
    "refusals",
    "[train][early_stopping]") {
  using crucible::EarlyStopping;
  using crucible::EarlyStoppingOptions;
  ContextFixture f;
  // Larger is better; an improvement must beat the best by more than 0.1; two validations in a
  // row without one stop.
  EarlyStopping stop(
      f.ctx, EarlyStoppingOptions("accuracy").smaller_is_better(false).patience(2).min_delta(0.1));
  stop.on_validation_end({{"validation_accuracy", 0.5}});
  CHECK(stop.best() == 0.5);
  stop.on_validation_end({{"validation_accuracy", 0.55}});  // not by more than 0.1
  CHECK(stop.best() == 0.5);
  CHECK(stop.validations_without_improvement() == 1);
  CHECK_FALSE(f.ctx.stop_requested());
  stop.on_validation_end({{"validation_accuracy", 0.7}});  // an improvement resets the count
  CHECK(stop.best() == 0.7);
  CHECK(stop.validations_without_improvement() == 0);
  torch::serialize::OutputArchive saved;
  stop.save_state(saved);
  stop.on_validation_end({{"validation_accuracy", 0.2}});
  CHECK_FALSE(f.ctx.stop_requested());
  stop.on_validation_end({{"validation_accuracy", 0.75}});
  CHECK(f.ctx.stop_requested());
  CHECK(f.state.stop_reason ==
        "early stopping: accuracy did not improve on its best 0.7 by more than 0.1 in 2 "
        "validation(s)");

  // Its state, saved after the third validation, restores the best and the count.
  torch::serialize::InputArchive archive;
  reload(saved, archive);
  EarlyStopping restored(f.ctx, EarlyStoppingOptions("validation_accuracy"));
  restored.load_state(archive);
  CHECK(restored.best() == 0.7);
  CHECK(restored.validations_without_improvement() == 0);

  // The defaults: smaller is better, and patience 0 stops at the first validation without an
  // improvement.
  ContextFixture g;
  EarlyStopping first(g.ctx, EarlyStoppingOptions("loss"));
  first.on_validation_end({{"validation_loss", 1.0}});
  first.on_validation_end({{"validation_loss", 0.5}});
  CHECK_FALSE(g.ctx.stop_requested());
  first.on_validation_end({{"validation_loss", 0.5}});
  CHECK(g.ctx.stop_requested());

  // A NaN never improves and is never the best: the first number after it is.
  ContextFixture h;
  EarlyStopping nan_first(h.ctx, EarlyStoppingOptions("loss").patience(2));
  nan_first.on_validation_end({{"validation_loss", std::nan("")}});
  CHECK_FALSE(nan_first.best().has_value());
  CHECK(nan_first.validations_without_improvement() == 1);
  nan_first.on_validation_end({{"validation_loss", 2.0}});
  CHECK(nan_first.best() == 2.0);
  nan_first.on_validation_end({{"validation_loss", std::nan("")}});
  nan_first.on_validation_end({{"validation_loss", 1.0}});
  CHECK(nan_first.best() == 1.0);
  CHECK_FALSE(h.ctx.stop_requested());
  ContextFixture n;
  EarlyStopping only_nan(n.ctx, EarlyStoppingOptions("loss").patience(2));
  only_nan.on_validation_end({{"validation_loss", std::nan("")}});
  CHECK_FALSE(n.ctx.stop_requested());
  only_nan.on_validation_end({{"validation_loss", std::nan("")}});
  CHECK(n.state.stop_reason == "early stopping: loss was NaN in each of 2 validation(s)");
  // A NaN best saved by an earlier version restores as none.
  torch::serialize::OutputArchive old_state;
  old_state.write("best", torch::tensor(std::nan(""), torch::kDouble));
  old_state.write("has_best", torch::tensor(true));
  old_state.write("bad_validations", torch::tensor(int64_t{1}));
  torch::serialize::InputArchive old_archive;
  reload(old_state, old_archive);
  EarlyStopping mended(n.ctx, EarlyStoppingOptions("loss"));
  mended.load_state(old_archive);
  CHECK_FALSE(mended.best().has_value());

  CHECK_THAT(error_of([&] { EarlyStopping(f.ctx, EarlyStoppingOptions("")); }),
             Catch::Contains("EarlyStopping: the metric name is empty"));
  CHECK_THAT(error_of([&] { EarlyStopping(f.ctx, EarlyStoppingOptions("loss").patience(-1)); }),
             Catch::Contains("patience and min_delta must not be negative, got -1 and 0"));
  CHECK_THAT(error_of([&] { EarlyStopping(f.ctx, EarlyStoppingOptions("loss").min_delta(-0.5)); }),
             Catch::Contains("patience and min_delta must not be negative, got 0 and -0.5"));
}
