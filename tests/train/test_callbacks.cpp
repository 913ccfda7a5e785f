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
