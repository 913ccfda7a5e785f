// Callback hooks fire where the fit loop says, carry their state across a resume, and fail
// clearly.
#include "catch.h"

#include "checkpoint/checkpoint.h"
#include "fit_helpers.h"

using namespace crucible::testing;
using S = std::vector<std::string>;

namespace {

// Two epochs of 13 batches, validated and checkpointed at the end of each.
crucible::ExperimentConfig two_epochs(const std::vector<std::string>& overrides = {}) {
  return recording_config(R"(max_length: {epochs: 2}
min_validation_period: {epochs: 1}
min_checkpoint_period: {epochs: 1}
)",
                          overrides);
}

// What EventLog records for validation number n of RecordingTrial's metrics.
std::string validation_end(int n) {
  return "on_validation_end #" + std::to_string(n) +
         " validation_avg_x validation_max_x validation_min_x validation_sum_len";
}

}  // namespace

TEST_CASE("callback hooks fire in fit-loop order", "[train][callbacks]") {
  TempDir tmp;
  EventLog::events().clear();
  fit_recording<CallbackTrial>(two_epochs(), tmp / "run");
  CHECK(EventLog::events() == S{"on_training_start", "on_training_epoch_start 0",
                                "on_training_epoch_end 0", "on_validation_start", validation_end(1),
                                "on_checkpoint_end batch-0000000013", "on_training_epoch_start 1",
                                "on_training_epoch_end 1", "on_validation_start", validation_end(2),
                                "on_checkpoint_end batch-0000000026", "on_training_end"});
}

TEST_CASE(
    "the batch hooks bracket every training batch and see its metrics and whether its optimizer "
    "stepped: every third batch under accumulation 3 but not a step skipped for a NaN",
    "[train][callbacks]") {
  TempDir tmp;
  EventLog::events().clear();
  fit_recording<CallbackTrial>(
      two_epochs({"hyperparameters.log_batches=true", "optimizations.aggregation_frequency=3",
                  "optimizations.non_finite=skip", "hyperparameters.nan_grad_at=7"}),
      tmp / "run");
  S expected = {"on_training_start"};
  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    expected.push_back("on_training_epoch_start " + std::to_string(epoch));
    for (int64_t b = 13 * epoch; b < 13 * (epoch + 1); ++b) {
      const bool stepped = (b + 1) % 3 == 0 && b != 8;  // batch 7's NaN is in the window 6-8
      expected.push_back("on_training_batch_start " + std::to_string(b));
      expected.push_back("on_training_batch_end " + std::to_string(b) + " loss" +
                         (stepped ? " stepped" : ""));
    }
    const std::string end = std::to_string(13 * (epoch + 1));
    expected.insert(expected.end(),
                    {"on_training_epoch_end " + std::to_string(epoch), "on_validation_start",
                     validation_end(static_cast<int>(epoch) + 1),
                     "on_checkpoint_end batch-00000000" + std::string(2 - end.size(), '0') + end});
  }
  expected.push_back("on_training_end");
  CHECK(EventLog::events() == expected);
}

TEST_CASE("a resumed run restores callback state and continues the hook sequence",
          "[train][callbacks]") {
  TempDir tmp;
  const auto config = two_epochs();
  EventLog::events().clear();
  fit_recording<CallbackTrial>(config, tmp / "full");
  const S full = EventLog::events();
  copy_tree(tmp / "full", tmp / "cut");
  util::remove_all(tmp / "cut/checkpoints/batch-0000000026");

  EventLog::events().clear();
  crucible::Trainer(config, crucible::TrialFactory::of<CallbackTrial>("RecordingTrial"))
      .fit(crucible::FitOptions().resume_dir(tmp / "cut").console(false));
  // The resumed run starts, then does exactly what the full run did after checkpoint 13; its
  // validation is #2 because the callback's count came back from the checkpoint.
  const auto after = std::find(full.begin(), full.end(), "on_checkpoint_end batch-0000000013");
  REQUIRE(after != full.end());
  S expected = {"on_training_start"};
  expected.insert(expected.end(), after + 1, full.end());
  CHECK(EventLog::events() == expected);
  CHECK(std::find(expected.begin(), expected.end(), validation_end(2)) != expected.end());
}

TEST_CASE("a callback that throws fails training naming the callback and hook",
          "[train][callbacks]") {
  TempDir tmp;
  int code = 0;
  EventLog::events().clear();
  CHECK(error_of(
            [&] {
              fit_recording<CallbackTrial>(
                  two_epochs({"hyperparameters.throw_in=on_validation_end"}), tmp / "run");
            },
            &code) == "callback 'log' on_validation_end threw: injected callback failure");
  CHECK(code == crucible::kExitTrainingFailed);
  CHECK(EventLog::events().back() == validation_end(1));
}

TEST_CASE("a checkpoint whose callbacks differ from the trial's is refused by name",
          "[train][callbacks]") {
  TempDir tmp;
  fit_recording<CallbackTrial>(two_epochs(), tmp / "run");
  const std::string checkpoint = tmp / "run/checkpoints/batch-0000000026";
  auto model = torch::nn::Linear(1, 1);
  crucible::checkpoint::Contents without;
  without.models = {model.ptr()};
  without.optimizers = {std::make_shared<torch::optim::SGD>(model->parameters(), 0.001)};
  CHECK_THROWS_WITH(crucible::checkpoint::load(checkpoint, without),
                    Catch::Contains("holds the state of callbacks [\"log\"], the trial builds []"));
  crucible::checkpoint::Contents with = without;
  with.callbacks = {{"log", std::make_shared<EventLog>()}};
  CHECK_NOTHROW(crucible::checkpoint::load(checkpoint, with));
}
