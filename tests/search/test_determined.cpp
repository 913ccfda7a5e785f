// Determined's MNIST tutorial experiment files (configs/determined/, both forms) through the real
// `trainer check` and `trainer fit`, shortened on the command line and otherwise as written.
#include <fmt/format.h>

#include "catch.h"
#include "process.h"

using namespace crucible::testing;
using nlohmann::json;

namespace {

std::string tutorial(const std::string& form, const std::string& file) {
  return std::string(CRUCIBLE_SOURCE_DIR) + "/configs/determined/" + form + "/" + file + ".yaml";
}

CommandResult trainer(const std::string& command, const std::string& config,
                      const std::string& sets) {
  return run_command(kTrainer + " " + command + " " + config + " " + sets);
}

// The rows of an experiment's log with `event`.
std::vector<json> events(const std::string& experiment, const std::string& event) {
  std::vector<json> out;
  for (const auto& row : read_metrics(experiment + "/experiment.jsonl")) {
    if (row["event"] == event) out.push_back(row);
  }
  return out;
}

// The last validation row of a run's metrics.jsonl.
json last_validation(const std::string& run) {
  const auto rows = read_metrics(run + "/metrics.jsonl");
  for (auto row = rows.rbegin(); row != rows.rend(); ++row) {
    if ((*row)["type"] == "validation") return *row;
  }
  FAIL("no validation row in " << run);
  return {};
}

// Runs `config` with `sets` into <tmp>/exp, requires success, and returns that path.
std::string fit_ok(const TempDir& tmp, const std::string& config, const std::string& sets) {
  const std::string exp = tmp / "exp";
  // A tenth of the test images keeps each validation short; the files stay as written.
  const auto r =
      trainer("fit", config, sets + " --set data.validation_records=1000 --output " + exp);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  return exp;
}

}  // namespace

TEST_CASE("Determined's 2021 tutorial files pass trainer check as written",
          "[search][determined]") {
  for (const char* file : {"const", "adaptive", "distributed"}) {
    const auto r = trainer("check", tutorial("2021", file), "");
    INFO(file << ": " << r.output);
    CHECK(r.exit_code == 0);
  }
  const auto r = trainer("check", tutorial("2021", "adaptive"), "");
  CHECK_THAT(r.output, Catch::Contains("max_length: {batches: 937}"));
}

TEST_CASE("Determined's current tutorial files name what they leave to the script, in one error",
          "[search][determined]") {
  const auto constant = trainer("check", tutorial("current", "const"), "");
  INFO(constant.output);
  CHECK(constant.exit_code == 2);
  CHECK_THAT(constant.output, Catch::Contains("2 problems"));
  CHECK_THAT(constant.output, Catch::Contains("hyperparameters.global_batch_size"));
  CHECK_THAT(constant.output, Catch::Contains("max_length"));

  const auto adaptive = trainer("check", tutorial("current", "adaptive"), "");
  INFO(adaptive.output);
  CHECK(adaptive.exit_code == 2);
  CHECK_THAT(adaptive.output, Catch::Contains("hyperparameters.global_batch_size"));
  CHECK_THAT(adaptive.output, !Catch::Contains("problems"));

  const std::string batch = "--set hyperparameters.global_batch_size=64";
  CHECK(trainer("check", tutorial("current", "adaptive"), batch).exit_code == 0);
  CHECK(trainer("check", tutorial("current", "const"), batch + " --set max_length.batches=937")
            .exit_code == 0);
  const auto derived = trainer("check", tutorial("current", "adaptive"), batch);
  CHECK_THAT(derived.output, Catch::Contains("max_length: {batches: 937}"));
}

TEST_CASE("Determined's const tutorial file trains TutorialCNN with Adadelta, in both forms",
          "[search][determined]") {
  for (const auto& [form, sets] :
       {std::pair<std::string, std::string>{"2021", "--set searcher.max_length.batches=30"},
        {"current", "--set hyperparameters.global_batch_size=64 --set max_length.batches=30"}}) {
    INFO(form);
    TempDir tmp;
    const std::string run = fit_ok(tmp, tutorial(form, "const"), sets);
    const json last = last_validation(run);
    CHECK(last["batches"] == 30);
    // 30 batches of Adadelta at learning rate 1 are well past chance (0.1) on Fashion-MNIST.
    CHECK(last["metrics"]["validation_accuracy"].get<double>() > 0.5);
  }
}

TEST_CASE("Determined's distributed tutorial file trains on 8 slots, in both forms",
          "[search][determined][distributed]") {
  for (const auto& [form, sets] :
       {std::pair<std::string, std::string>{"2021", "--set searcher.max_length.batches=3"},
        {"current", "--set hyperparameters.global_batch_size=512 --set max_length.batches=3"}}) {
    INFO(form);
    TempDir tmp;
    const std::string run = fit_ok(tmp, tutorial(form, "distributed"), sets);
    CHECK_THAT(read_file(run + "/config.yaml"), Catch::Contains("slots_per_trial: 8"));
    const json last = last_validation(run);
    CHECK(last["batches"] == 3);
    CHECK(last["records"] == 3 * 512);
  }
}

TEST_CASE("Determined's adaptive tutorial file runs an ASHA search, in both forms",
          "[search][determined]") {
  for (const auto& [form, sets] :
       {std::pair<std::string, std::string>{
            "2021", "--set searcher.max_length.batches=16 --set searcher.max_trials=4"},
        {"current",
         "--set hyperparameters.global_batch_size=64 --set searcher.max_time=16 "
         "--set searcher.max_trials=4"}}) {
    INFO(form);
    TempDir tmp;
    const std::string exp = fit_ok(tmp, tutorial(form, "adaptive"), sets);
    CHECK(events(exp, "created").size() == 4);
    int64_t longest = 0;
    for (const auto& row : events(exp, "validated")) {
      longest = std::max(longest, row["length"].get<int64_t>());
      for (const char* h : {"learning_rate", "n_filters1", "n_filters2", "dropout1", "dropout2"}) {
        CHECK(row["hparams"].contains(h));
      }
    }
    CHECK(longest == 16);
    CHECK(crucible::util::exists(exp + "/best"));
  }
}
