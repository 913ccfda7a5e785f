#include <map>
#include <sstream>

#include <fmt/format.h>

#include "catch.h"

#include "checkpoint/checkpoint.h"
#include "fit_helpers.h"
#include "train/session.h"

using namespace crucible::testing;
using V = std::vector<int64_t>;

namespace {

const nlohmann::json& last_validation(const std::vector<nlohmann::json>& rows) {
  for (auto it = rows.rbegin(); it != rows.rend(); ++it) {
    if ((*it)["type"] == "validation") return (*it)["metrics"];
  }
  FAIL("no validation row");
  return rows.front();
}

}  // namespace

TEST_CASE("validation metrics are reduced with AVG weighted by records, SUM, MAX, MIN", "[train]") {
  TempDir tmp;
  // 25 validation records in batches of 4: the last batch holds one record.
  auto result = fit_recording(recording_config("max_length: {batches: 2}\n"), tmp / "run");
  const auto rows = read_metrics(tmp / "run/metrics.jsonl");
  const auto& m = last_validation(rows);
  CHECK(m["validation_avg_x"].get<double>() == Approx(12.0).epsilon(1e-12));
  CHECK(m["validation_sum_len"].get<double>() == 25.0);
  CHECK(m["validation_max_x"].get<double>() == 24.0);
  CHECK(m["validation_min_x"].get<double>() == 0.0);
  CHECK(result.last_validation["validation_sum_len"] == 25.0);
}

TEST_CASE("the validation loader is built once and read whole at every validation", "[train]") {
  for (const int workers : {0, 2}) {
    INFO(workers << " loader workers");
    TempDir tmp;
    // 25 validation records in 7 batches of 4, validated after batches 5, 10, 15 and 20.
    const auto config =
        recording_config("max_length: {batches: 20}\n",
                         {"min_validation_period.batches=5",
                          "hyperparameters.validation_workers=" + std::to_string(workers)});
    RecordingTrial::validation_loaders_built() = 0;
    RecordingTrial::evaluated_at().clear();
    fit_recording(config, tmp / "run");
    CHECK(RecordingTrial::validation_loaders_built() == 1);
    CHECK(RecordingTrial::evaluated_at().size() == 4 * 7);
    int validations = 0;
    for (const auto& row : read_metrics(tmp / "run/metrics.jsonl")) {
      if (row["type"] != "validation") continue;
      ++validations;
      CHECK(row["metrics"]["validation_sum_len"].get<double>() == 25.0);
      CHECK(row["metrics"]["validation_avg_x"].get<double>() == Approx(12.0).epsilon(1e-12));
    }
    CHECK(validations == 4);
    // A pass cut short (test mode validates one batch) and a whole one after it.
    const auto factory = crucible::TrialFactory::of<RecordingTrial>("RecordingTrial");
    crucible::train::TrialSession session(config, factory);
    CHECK(session.validate(1).at("validation_sum_len") == 4.0);
    CHECK(session.validate().at("validation_sum_len") == 25.0);
    CHECK(session.validate(2).at("validation_sum_len") == 8.0);
    CHECK(RecordingTrial::validation_loaders_built() == 2);
  }
}

namespace {

// RecordingTrial with two more wrapped models: a student whose batch norm the trial keeps in
// evaluation mode, and a teacher kept in evaluation mode whole. It records the training flags
// (student, its norm, teacher) that each train_batch and evaluate_batch call sees; with
// hyperparameter fail_validation_at its evaluate_batch throws at that validation batch.
class ModeTrial : public RecordingTrial {
 public:
  using Modes = std::vector<bool>;

  explicit ModeTrial(crucible::TrialContext& ctx)
      : RecordingTrial(ctx),
        norm_(torch::nn::BatchNorm1d(1)),
        student_(ctx.wrap_model(torch::nn::Sequential(torch::nn::Linear(1, 1), norm_))),
        teacher_(ctx.wrap_model(torch::nn::Linear(1, 1))) {
    norm_->eval();
    teacher_->eval();
  }
  crucible::Metrics train_batch(crucible::Batch& batch, int64_t epoch_idx,
                                int64_t batch_idx) override {
    seen().emplace_back("train", modes());
    return RecordingTrial::train_batch(batch, epoch_idx, batch_idx);
  }
  crucible::Metrics evaluate_batch(crucible::Batch& batch, int64_t batch_idx) override {
    seen().emplace_back("evaluate", modes());
    if (batch_idx == context().hparam<int64_t>("fail_validation_at", -1)) {
      throw std::runtime_error("injected validation failure");
    }
    return RecordingTrial::evaluate_batch(batch, batch_idx);
  }
  Modes modes() const {
    return {student_->is_training(), norm_->is_training(), teacher_->is_training()};
  }
  static std::vector<std::pair<std::string, Modes>>& seen() {
    static std::vector<std::pair<std::string, Modes>> all;
    return all;
  }

 private:
  torch::nn::BatchNorm1d norm_;
  torch::nn::Sequential student_;
  torch::nn::Linear teacher_;
};

}  // namespace

TEST_CASE("validation runs every module in eval mode and gives each its own mode back", "[train]") {
  TempDir tmp;
  const ModeTrial::Modes training = {true, false, false};
  const ModeTrial::Modes evaluating = {false, false, false};
  // 10 batches, validated after batches 4 and 8 (7 batches each) and at the end.
  ModeTrial::seen().clear();
  fit_recording<ModeTrial>(
      recording_config("max_length: {batches: 10}\n", {"min_validation_period.batches=4"}),
      tmp / "run");
  int trained = 0;
  int evaluated = 0;
  for (const auto& [call, modes] : ModeTrial::seen()) {
    INFO(call << " call " << trained + evaluated);
    CHECK(modes == (call == "train" ? training : evaluating));
    ++(call == "train" ? trained : evaluated);
  }
  CHECK(trained == 10);
  CHECK(evaluated == 3 * 7);

  // A validation that throws leaves every module in the mode it had before.
  const auto config =
      recording_config("max_length: {batches: 10}\n", {"hyperparameters.fail_validation_at=2"});
  const auto factory = crucible::TrialFactory::of<ModeTrial>("ModeTrial");
  crucible::train::TrialSession session(config, factory);
  auto& trial = dynamic_cast<ModeTrial&>(session.trial());
  CHECK_THAT(error_of([&] { session.validate(); }), Catch::Contains("injected validation failure"));
  CHECK(trial.modes() == training);
}

TEST_CASE("a shuffled validation loader without a seed of its own follows the experiment seed",
          "[train]") {
  const auto factory = crucible::TrialFactory::of<RecordingTrial>("RecordingTrial");
  // The records of the first validation batch (4 of the 25, in the loader's order).
  const auto first_batch_mean = [&](int seed) {
    const auto config = recording_config(
        "max_length: {batches: 2}\n", {"hyperparameters.validation_shuffle=true",
                                       "reproducibility.experiment_seed=" + std::to_string(seed)});
    crucible::train::TrialSession session(config, factory);
    return session.validate(1).at("validation_avg_x");
  };
  const double one = first_batch_mean(1);
  CHECK(first_batch_mean(1) == one);
  CHECK(first_batch_mean(2) != one);
}

namespace {

// Its build_validation_data_loader returns an empty DataLoader.
class EmptyLoaderTrial : public RecordingTrial {
 public:
  using RecordingTrial::RecordingTrial;
  crucible::DataLoader build_validation_data_loader() override { return {}; }
};

}  // namespace

TEST_CASE("a trial that returns an empty DataLoader fails naming the method", "[train]") {
  TempDir tmp;
  int code = 0;
  CHECK(error_of(
            [&] {
              fit_recording<EmptyLoaderTrial>(recording_config("max_length: {batches: 2}\n"),
                                              tmp / "run");
            },
            &code) == "build_validation_data_loader returned an empty DataLoader");
  CHECK(code == crucible::kExitTrainingFailed);
}

TEST_CASE("a training set smaller than a global batch trains, with a warning naming both sizes",
          "[train]") {
  TempDir tmp;
  const auto result = fit_recording(
      recording_config("max_length: {epochs: 2}\n", {"hyperparameters.records=5"}), tmp / "run");
  CHECK(result.batches_trained == 2);  // one batch of the 5 records an epoch
  CHECK_THAT(read_file(tmp / "run/trainer.log"),
             Catch::Contains("WARN the training set holds 5 records, fewer than a global batch "
                             "(8): every batch is the whole set"));
  fit_recording(recording_config("max_length: {epochs: 1}\n"), tmp / "full");
  CHECK_THAT(read_file(tmp / "full/trainer.log"), !Catch::Contains("fewer than a global batch"));
}

TEST_CASE("test mode trains one batch, validates one batch and round-trips a checkpoint",
          "[train]") {
  TempDir tmp;
  auto result = fit_recording(recording_config("max_length: {epochs: 5}\n"), tmp / "run",
                              crucible::FitOptions().test_mode(true));
  CHECK(RecordingTrial::calls().size() == 1);
  CHECK(result.batches_trained == 1);
  CHECK(checkpoint_batches(tmp / "run") == V{1});
  auto rows = read_metrics(tmp / "run/metrics.jsonl");
  CHECK(batches_of(rows, "validation") == V{1});
  // One validation batch of 4 records: indices 0..3.
  CHECK(last_validation(rows)["validation_sum_len"] == 4.0);
}

TEST_CASE("a checkpoint follows every row of its batch: none is written twice at one batch",
          "[train]") {
  // (a) A periodic checkpoint due at the last batch, where the end reports, validates and
  // checkpoints; (b) a stop the trial asks for in batch 5, agreed after batch 6,
  // whose validation checkpoints (policy all) before the stop's rows. Either first checkpoint,
  // taken, would make a run resumed from it report its batch's rows a second time.
  const std::vector<std::pair<std::vector<std::string>, int64_t>> runs = {
      {{"min_checkpoint_period.batches=5"}, 10},
      {{"checkpoint_policy=all", "min_validation_period.batches=2", "hyperparameters.stop_at=5"},
       6}};
  for (const auto& [overrides, last] : runs) {
    INFO(last);
    TempDir tmp;
    fit_recording(recording_config("max_length: {batches: 10}\n", overrides), tmp / "run");
    std::map<int64_t, int> saves;
    std::istringstream log(read_file(tmp / "run/trainer.log"));
    for (std::string line; std::getline(log, line);) {
      const auto at = line.find("[checkpoint] batch");
      if (at != std::string::npos) ++saves[std::stoll(line.substr(at + 18))];
    }
    REQUIRE(saves.count(last) == 1);
    for (const auto& [batch, count] : saves) {
      INFO("batch " << batch);
      CHECK(count == 1);
    }
    // The last checkpoint holds the end: its validation, and the stop.
    const auto meta = nlohmann::json::parse(
        read_file(tmp / fmt::format("run/checkpoints/batch-{:010d}/metadata.json", last)));
    INFO(meta.dump());
    CHECK(meta["validation"].contains("validation_avg_x"));
    if (last == 6) CHECK(meta["trainer_state"].value("stopped", "") == "stop_at reached");
  }
}

TEST_CASE("a NaN searcher metric is never the best: the first finite one is", "[train]") {
  TempDir tmp;
  // Validations after batches 2 (NaN), 4, 6, 8 and 10 (0 each): the best is the one at 4.
  const auto config = recording_config(
      "max_length: {batches: 10}\nmin_validation_period: {batches: 2}\n",
      {"checkpoint_policy=best", "searcher.metric=validation_z", "hyperparameters.also_report=z",
       "hyperparameters.also_report_nan_until=3"});
  fit_recording(config, tmp / "run");
  CHECK(checkpoint_batches(tmp / "run") == V{4, 10});
  // The log says which validation made it, once.
  const std::string log = read_file(tmp / "run/trainer.log");
  CHECK_THAT(log, Catch::Contains("WARN validation metric 'validation_z' is nan at batch 2, made "
                                  "by the validation"));
  CHECK(log.find("is nan at batch 4") == std::string::npos);
}

TEST_CASE(
    "an infinite searcher metric is written as \"inf\" and read back as infinity: a resumed run "
    "keeps the best the uninterrupted run keeps",
    "[train]") {
  TempDir tmp;
  // Validations after batches 2 (infinity, the best when larger is better), 4, 6, 8, 10 (0).
  const auto config = recording_config(
      "max_length: {batches: 10}\nmin_validation_period: {batches: 2}\n",
      {"checkpoint_policy=best", "searcher.metric=validation_z", "searcher.smaller_is_better=false",
       "hyperparameters.also_report=z", "hyperparameters.also_report_inf_until=3"});
  fit_recording(config, tmp / "full");
  CHECK(checkpoint_batches(tmp / "full") == V{2, 10});
  const auto rows = read_metrics(tmp / "full/metrics.jsonl");
  const auto first = std::find_if(rows.begin(), rows.end(),
                                  [](const auto& row) { return row["type"] == "validation"; });
  REQUIRE(first != rows.end());
  CHECK((*first)["metrics"]["validation_z"] == "inf");
  const auto best_in = [&](const std::string& run) {
    return nlohmann::json::parse(read_file(
        run + "/checkpoints/batch-0000000010/metadata.json"))["trainer_state"]["best_metric"];
  };
  CHECK(best_in(tmp / "full") == "inf");

  // Resumed from its checkpoint after batch 2, it finds no better validation either.
  copy_tree(tmp / "full", tmp / "cut");
  util::remove_all(tmp / "cut/checkpoints/batch-0000000010");
  crucible::Trainer(config, crucible::TrialFactory::of<RecordingTrial>("RecordingTrial"))
      .fit(crucible::FitOptions().resume_dir(tmp / "cut").console(false));
  CHECK(checkpoint_batches(tmp / "cut") == V{2, 10});
  CHECK(best_in(tmp / "cut") == "inf");
}

namespace {

// A 20-batch fit with checkpoints every 2 batches and `fault` (a hyperparameter setting) that
// diverges at batch 3: returns its error after requiring exit 1, a message naming checkpoint 2 as
// the last good one, and checkpoint 2 alone on disk, loadable.
std::string diverged_fit(const TempDir& tmp, const std::string& fault) {
  auto config = recording_config(R"(max_length: {batches: 20}
min_checkpoint_period: {batches: 2}
scheduling_unit: 100
)",
                                 {fault});
  int code = 0;
  const std::string message = error_of([&] { fit_recording(config, tmp / "run"); }, &code);
  CHECK(code == crucible::kExitTrainingFailed);
  CHECK_THAT(message, Catch::Contains("checkpoints/batch-0000000002"));
  CHECK(checkpoint_batches(tmp / "run") == V{2});
  auto model = torch::nn::Linear(1, 1);
  crucible::checkpoint::Contents contents;
  contents.models = {model.ptr()};
  contents.optimizers = {std::make_shared<torch::optim::SGD>(model->parameters(), 0.1)};
  auto meta = crucible::checkpoint::load(tmp / "run/checkpoints/batch-0000000002", contents);
  CHECK(meta.batches == 2);
  return message;
}

}  // namespace

TEST_CASE("a NaN loss stops training with a clear error: the last good checkpoint loads",
          "[train]") {
  TempDir tmp;
  // Found when checkpoint 4 is due, which the pending report covers.
  CHECK_THAT(diverged_fit(tmp, "hyperparameters.nan_at=3"),
             Catch::Contains("training metric 'loss' is nan at batch 3 (epoch 0) "
                             "(optimizations.non_finite: stop); stopping"));
}

TEST_CASE(
    "weights a non-finite gradient stepped are never checkpointed, though the loss was finite",
    "[train]") {
  TempDir tmp;
  // Batch 3's loss is finite, its weight gradient NaN: the step after it leaves the weight NaN
  // just as checkpoint 4 is due, a batch before any loss shows it.
  CHECK_THAT(diverged_fit(tmp, "hyperparameters.inf_grad_at=3"),
             Catch::Contains("model 0 parameter 'weight' holds a NaN or an infinity at batch 4"));
}

TEST_CASE("a trial that throws in train_batch fails naming the method and batch", "[train]") {
  TempDir tmp;
  auto config = recording_config("max_length: {batches: 20}\n", {"hyperparameters.fail_at=5"});
  int code = 0;
  const std::string message = error_of([&] { fit_recording(config, tmp / "run"); }, &code);
  CHECK(code == crucible::kExitTrainingFailed);
  CHECK(message == "train_batch (batch 5) threw: injected failure");

  // A failed CAFFE_ENFORCE (LibTorch's allocator reports an allocation it cannot make so) ends
  // its message with a native stack, without the "Exception raised from" line TORCH_CHECK's have:
  // the error holds neither.
  auto enforce = recording_config("max_length: {batches: 20}\n", {"hyperparameters.enforce_at=3"});
  const std::string enforced = error_of([&] { fit_recording(enforce, tmp / "enforce"); }, &code);
  CHECK(code == crucible::kExitTrainingFailed);
  CHECK_THAT(enforced, Catch::StartsWith("train_batch (batch 3) threw: [enforce fail at ") &&
                           Catch::EndsWith("injected enforce failure"));
  CHECK_THAT(enforced, !Catch::Contains("frame #") && !Catch::Contains("\n"));
}

namespace {

// RecordingTrial misused in one way, named by `How`.
enum class Misuse {
  kThrowCString,       // train_batch throws a C string at batch 1
  kCtorThrowsInt,      // the constructor throws an int
  kBatchLength,        // get_batch_length returns 0
  kWrapLate,           // train_batch wraps a model
  kStepUnwrapped,      // train_batch steps an optimizer it never wrapped
  kSkippedStepsMetric  // train_batch returns a metric named skipped_steps
};

template <Misuse How>
class MisusingTrial : public RecordingTrial {
 public:
  explicit MisusingTrial(crucible::TrialContext& ctx) : RecordingTrial(ctx) {
    if (How == Misuse::kCtorThrowsInt) throw 42;
  }
  crucible::Metrics train_batch(crucible::Batch& batch, int64_t epoch_idx,
                                int64_t batch_idx) override {
    crucible::Metrics m = RecordingTrial::train_batch(batch, epoch_idx, batch_idx);
    if (How == Misuse::kThrowCString && batch_idx == 1) throw "bad input row";
    if (How == Misuse::kWrapLate) context().wrap_model(torch::nn::Linear(1, 1));
    if (How == Misuse::kStepUnwrapped) context().step_optimizer(loose_);
    if (How == Misuse::kSkippedStepsMetric) m["skipped_steps"] = 5.0;
    return m;
  }
  int64_t get_batch_length(const crucible::Batch& batch) override {
    return How == Misuse::kBatchLength ? 0 : RecordingTrial::get_batch_length(batch);
  }

 private:
  crucible::Optimizer loose_ = std::make_shared<torch::optim::SGD>(
      std::vector<torch::Tensor>{torch::zeros({1}, torch::requires_grad())},
      torch::optim::SGDOptions(0.1));
};

// SaveStateTrial's save_state throws.
class SaveStateTrial : public RecordingTrial {
 public:
  using RecordingTrial::RecordingTrial;
  void save_state(torch::serialize::OutputArchive&) override {
    throw std::runtime_error("the llama ate the archive");
  }
};

}  // namespace

// The error that fitting trial T for 4 batches (with `overrides`) into `run` ends with, its exit
// code into *code.
template <class T>
std::string misuse_error(const std::string& run, int* code,
                         const std::vector<std::string>& overrides = {}) {
  const auto config = recording_config("max_length: {batches: 4}\n", overrides);
  return error_of([&] { fit_recording<T>(config, run); }, code);
}

TEST_CASE("misuse of the trial API fails naming the method, the batch and the fix", "[train]") {
  TempDir tmp;
  int code = 0;
  // A thrown value that is no std::exception: named by its type, not a crash.
  CHECK(misuse_error<MisusingTrial<Misuse::kThrowCString>>(tmp / "a", &code) ==
        "train_batch (batch 1) threw a value of type 'char const*', not a std::exception");
  CHECK(code == crucible::kExitTrainingFailed);
  CHECK(misuse_error<MisusingTrial<Misuse::kCtorThrowsInt>>(tmp / "b", &code) ==
        "trial RecordingTrial: constructor threw a value of type 'int', not a std::exception");
  CHECK(code == crucible::kExitPlugin);
  // A record count that would weigh the batch's metrics by nothing.
  CHECK_THAT(misuse_error<MisusingTrial<Misuse::kBatchLength>>(tmp / "c", &code),
             Catch::StartsWith("get_batch_length returned 0 for validation batch 0; "));
  // What a checkpoint would not hold: a model wrapped late, an optimizer never wrapped.
  CHECK_THAT(misuse_error<MisusingTrial<Misuse::kWrapLate>>(tmp / "d", &code),
             Catch::StartsWith("train_batch (batch 0): wrap_model: called after the trial's "
                               "constructor"));
  CHECK_THAT(misuse_error<MisusingTrial<Misuse::kStepUnwrapped>>(tmp / "e", &code),
             Catch::StartsWith("train_batch (batch 0): step_optimizer: the optimizer was not "
                               "wrapped with wrap_optimizer"));
  // A metric Crucible reports itself, under non_finite: skip.
  CHECK(misuse_error<MisusingTrial<Misuse::kSkippedStepsMetric>>(
            tmp / "f", &code, {"optimizations.non_finite=skip"}) ==
        "train_batch (batch 0) returned metric 'skipped_steps', which Crucible reports itself "
        "(the optimizer steps skipped for non-finite gradients); rename it");
  // A save_state that throws is named, not taken for the disk's fault.
  CHECK_THAT(misuse_error<SaveStateTrial>(tmp / "g", &code),
             Catch::Contains("RecordingTrial::save_state threw: the llama ate the archive"));
}

TEST_CASE("a trial overriding both or neither evaluation method is refused", "[train]") {
  TempDir tmp;
  auto config = recording_config("max_length: {batches: 2}\n");
  int code = 0;
  CHECK_THAT(error_of([&] { fit_recording<BothEvalTrial>(config, tmp / "a"); }, &code),
             Catch::Contains("must override exactly one of evaluate_batch and "
                             "evaluate_full_dataset; it overrides both"));
  CHECK(code == crucible::kExitPlugin);
  auto neither = crucible::Trainer(config, crucible::TrialFactory::of<NeitherEvalTrial>("N"));
  CHECK_THAT(error_of([&] { neither.fit(crucible::FitOptions().output_dir(tmp / "b")); }),
             Catch::Contains("it overrides neither"));
}

TEST_CASE("a constructor that throws is reported with the trial's name", "[train]") {
  TempDir tmp;
  auto trainer = crucible::Trainer(recording_config("max_length: {batches: 2}\n"),
                                   crucible::TrialFactory::of<ThrowingCtorTrial>("Throwing"));
  int code = 0;
  CHECK(error_of([&] { trainer.fit(crucible::FitOptions().output_dir(tmp / "r").console(false)); },
                 &code) ==
        "trial Throwing: constructor threw: cannot build the model: out of llamas");
  CHECK(code == crucible::kExitPlugin);
}

namespace {

// Its constructor asks for a hyperparameter the config lacks: a ConfigError.
class MissingHparamTrial : public NeitherEvalTrial {
 public:
  explicit MissingHparamTrial(crucible::TrialContext& ctx) : NeitherEvalTrial(ctx) {
    ctx.hparam<double>("no_such_hparam");
  }
  crucible::Metrics evaluate_batch(crucible::Batch&, int64_t) override { return {}; }
};

}  // namespace

TEST_CASE("an error passed on with context keeps its exit code and, nested, its type", "[train]") {
  TempDir tmp;
  auto trainer = crucible::Trainer(recording_config("max_length: {batches: 2}\n"),
                                   crucible::TrialFactory::of<MissingHparamTrial>("Missing"));
  bool nested_config_error = false;
  try {
    trainer.fit(crucible::FitOptions().output_dir(tmp / "r").console(false));
    FAIL("fit did not throw");
  } catch (const crucible::Error& e) {
    CHECK_THAT(e.what(), Catch::Contains("trial Missing: constructor failed: hyperparameter "
                                         "'no_such_hparam'"));
    CHECK(e.exit_code() == crucible::kExitBadUsage);
    try {
      std::rethrow_if_nested(e);
    } catch (const crucible::ConfigError& inner) {
      nested_config_error = true;
      CHECK_THAT(inner.what(), Catch::StartsWith("hyperparameter 'no_such_hparam'"));
    }
  }
  CHECK(nested_config_error);
}

TEST_CASE("a run continued from a checkpoint ends where the uninterrupted run ends", "[train]") {
  TempDir tmp;
  auto config = recording_config(R"(max_length: {epochs: 3}
min_validation_period: {epochs: 1}
min_checkpoint_period: {epochs: 1}
scheduling_unit: 5
)");
  fit_recording(config, tmp / "full");
  const auto full_calls = RecordingTrial::calls();

  // A copy of the run that "died" after its first checkpoint, with a torn metrics line.
  copy_tree(tmp / "full", tmp / "cut");
  util::remove_all(tmp / "cut/checkpoints/batch-0000000026");
  util::remove_all(tmp / "cut/checkpoints/batch-0000000039");
  std::ofstream(tmp / "cut/metrics.jsonl", std::ios::app) << "{\"type\": \"trai";

  RecordingTrial::calls().clear();
  RecordingTrial::restored_trained() = -1;
  crucible::Trainer(config, crucible::TrialFactory::of<RecordingTrial>("RecordingTrial"))
      .fit(crucible::FitOptions().resume_dir(tmp / "cut").console(false));
  const auto& resumed = RecordingTrial::calls();
  CHECK(RecordingTrial::restored_trained() == 13);  // the trial's own state came back
  REQUIRE(resumed.size() == 26);
  for (size_t i = 0; i < resumed.size(); ++i) {
    CHECK(resumed[i].batch_idx == full_calls[i + 13].batch_idx);
    CHECK(resumed[i].indices == full_calls[i + 13].indices);
  }
  CHECK(read_file(tmp / "cut/metrics.jsonl") == read_file(tmp / "full/metrics.jsonl"));
  CHECK(read_file(tmp / "cut/checkpoints/batch-0000000039/model_0.pt") ==
        read_file(tmp / "full/checkpoints/batch-0000000039/model_0.pt"));
}

TEST_CASE(
    "resuming a directory without a run is a usage error, and an output_dir run of the "
    "same config continues but one of another is refused",
    "[train]") {
  TempDir tmp;
  auto config = recording_config("max_length: {batches: 2}\n");
  int code = 0;
  CHECK_THAT(
      error_of([&] { fit_recording(config, "", crucible::FitOptions().resume_dir(tmp.str())); },
               &code),
      Catch::Contains("not a run directory"));
  CHECK(code == crucible::kExitBadUsage);
  CHECK(error_of(
            [&] { fit_recording(config, "", crucible::FitOptions().resume_dir(tmp / "nowhere")); },
            &code) == "--resume " + (tmp / "nowhere") + ": no such directory");
  CHECK(code == crucible::kExitBadUsage);
  write_file(tmp / "file", "");
  CHECK(
      error_of([&] { fit_recording(config, "", crucible::FitOptions().resume_dir(tmp / "file")); },
               &code) == "--resume " + (tmp / "file") + ": a file, not a directory");
  CHECK(code == crucible::kExitBadUsage);
  fit_recording(config, tmp / "run");
  // The same config again (a requeued job): the finished run continues, and trains no batch.
  const auto again = fit_recording(config, tmp / "run");
  CHECK(again.batches_trained == 2);
  CHECK(RecordingTrial::calls().empty());
  CHECK(checkpoint_batches(tmp / "run") == V{2});
  auto longer = recording_config("max_length: {batches: 3}\n");
  CHECK_THAT(error_of([&] { fit_recording(longer, tmp / "run"); }, &code),
             Catch::Contains("it holds a run of another config") &&
                 Catch::Contains("max_length.batches: 2 -> 3"));
  CHECK(code == crucible::kExitBadUsage);
}

TEST_CASE("LR schedulers step per their mode: the rate of every batch, by hand", "[train]") {
  // 14 records in batches of 4: epochs of 4 batches, the last one short; 3 epochs. With
  // aggregation_frequency 3 the optimizer steps after batches 2, 5, 8 and 11; epochs end after
  // batches 3, 7 and 11; the manual scheduler steps after batches 4 and 9. Each entry is the
  // scheduler's step count while that batch trains.
  struct Row {
    const char* mode;
    int aggregation;
    std::vector<int64_t> steps;
  };
  const std::vector<Row> table = {
      {"every_batch", 1, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}},
      {"every_batch", 3, {0, 0, 0, 3, 3, 3, 6, 6, 6, 9, 9, 9}},
      {"every_optimizer_step", 1, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}},
      {"every_optimizer_step", 3, {0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3}},
      {"every_epoch", 1, {0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2}},
      {"every_epoch", 3, {0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2}},
      {"manual", 1, {0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 2, 2}},
      {"manual", 3, {0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 2, 2}},
  };
  TempDir tmp;
  for (const Row& row : table) {
    INFO(row.mode << ", aggregation_frequency " << row.aggregation);
    auto config = recording_config(
        "max_length: {epochs: 3}\n",
        {"hyperparameters.step_mode=" + std::string(row.mode), "hyperparameters.records=14",
         "hyperparameters.global_batch_size=4", "hyperparameters.manual_every=5",
         "optimizations.aggregation_frequency=" + std::to_string(row.aggregation)});
    fit_recording(config, tmp / (row.mode + std::to_string(row.aggregation)));
    const auto& calls = RecordingTrial::calls();
    REQUIRE(calls.size() == row.steps.size());
    for (size_t b = 0; b < calls.size(); ++b) {
      INFO("batch " << b);
      CHECK(calls[b].lr == 0.001 * (1.0 / static_cast<double>(1 + row.steps[b])));
    }
  }
}

namespace {

// Fits `config` (30 batches, checkpoints every 10) into <tmp>/full, then resumes a copy of it
// cut back to its checkpoint after batch 10; checks that the resumed batches train with the
// rates of the uninterrupted run and end with its weights. Returns the uninterrupted run's calls.
std::vector<RecordingTrial::Call> check_resumed_rates(const crucible::ExperimentConfig& config,
                                                      const TempDir& tmp) {
  fit_recording(config, tmp / "full");
  const auto full = RecordingTrial::calls();
  copy_tree(tmp / "full", tmp / "cut");
  util::remove_all(tmp / "cut/checkpoints/batch-0000000020");
  util::remove_all(tmp / "cut/checkpoints/batch-0000000030");
  RecordingTrial::calls().clear();
  crucible::Trainer(config, crucible::TrialFactory::of<RecordingTrial>("RecordingTrial"))
      .fit(crucible::FitOptions().resume_dir(tmp / "cut").console(false));
  const auto& resumed = RecordingTrial::calls();
  REQUIRE(resumed.size() == 20);
  for (size_t i = 0; i < resumed.size(); ++i) {
    INFO("batch " << resumed[i].batch_idx);
    CHECK(resumed[i].lr == full[i + 10].lr);
  }
  CHECK(read_file(tmp / "cut/checkpoints/batch-0000000030/model_0.pt") ==
        read_file(tmp / "full/checkpoints/batch-0000000030/model_0.pt"));
  return full;
}

}  // namespace

TEST_CASE("a resumed run steps an epoch scheduler as the uninterrupted run does", "[train]") {
  // 13 batches per epoch, an optimizer step every 5 batches (after batches 4, 9, 14, ...): a
  // checkpoint after batch 10 falls in epoch 0 after its last optimizer step, so only the
  // checkpointed optimizer counters say that the epoch's end must step the scheduler.
  TempDir tmp;
  auto config = recording_config(
      "max_length: {batches: 30}\nmin_checkpoint_period: {batches: 10}\n",
      {"hyperparameters.step_mode=every_epoch", "optimizations.aggregation_frequency=5"});
  const auto full = check_resumed_rates(config, tmp);
  const auto meta =
      nlohmann::json::parse(read_file(tmp / "cut/checkpoints/batch-0000000010/metadata.json"));
  CHECK(meta["optimizer_steps"] == nlohmann::json::array({2}));
  CHECK(full[13].lr == Approx(0.001 / 2));  // the end of epoch 0 stepped the scheduler
}

TEST_CASE("LibTorch's own StepLR steps per its mode and resumes from a checkpoint", "[train]") {
  // The rates LibTorch's StepLR(step_size 3, gamma 0.5) gives, stepped by hand after each batch.
  torch::nn::Linear reference_model(1, 1);
  torch::optim::SGD reference(reference_model->parameters(), 0.001);
  torch::optim::StepLR reference_schedule(reference, 3, 0.5);
  std::vector<double> expected;
  for (int b = 0; b < 30; ++b) {
    expected.push_back(reference.param_groups()[0].options().get_lr());
    reference_schedule.step();
  }
  REQUIRE(expected[29] < expected[0] / 100);
  TempDir tmp;
  auto config = recording_config(
      "max_length: {batches: 30}\nmin_checkpoint_period: {batches: 10}\n",
      {"hyperparameters.step_mode=every_batch", "hyperparameters.scheduler=torch_step"});
  const auto full = check_resumed_rates(config, tmp);
  for (size_t b = 0; b < full.size(); ++b) {
    INFO("batch " << b);
    CHECK(full[b].lr == expected[b]);
  }
  // The checkpoint holds the LibTorch scheduler's own step count and the rates.
  const auto meta =
      nlohmann::json::parse(read_file(tmp / "cut/checkpoints/batch-0000000010/metadata.json"));
  CHECK(meta["schedulers"] ==
        nlohmann::json::array({{{"step_count", 10}, {"rates", {expected[10]}}}}));
}

TEST_CASE("a LibTorch scheduler over an optimizer that was not wrapped is refused", "[train]") {
  struct UnwrappedTrial : RecordingTrial {
    explicit UnwrappedTrial(crucible::TrialContext& ctx) : RecordingTrial(ctx) {
      ctx.wrap_lr_scheduler(torch::optim::StepLR(sgd_, 1, 0.5), crucible::StepMode::kEveryBatch);
    }
    torch::nn::Linear other_{1, 1};
    torch::optim::SGD sgd_{other_->parameters(), 0.1};
  };
  TempDir tmp;
  CHECK_THAT(error_of([&] {
               fit_recording<UnwrappedTrial>(recording_config("max_length: {batches: 1}\n"),
                                             tmp / "run");
             }),
             Catch::Contains("the LibTorch scheduler's optimizer was not wrapped"));
}

TEST_CASE("outside train_batch the counters say how many batches were trained", "[train]") {
  TempDir tmp;
  // 13 batches an epoch; validations and checkpoints after 13 batches (an epoch's end) and 20
  // (mid-epoch, the end of training), 7 validation batches each.
  auto config =
      recording_config("max_length: {batches: 20}\n",
                       {"min_validation_period.batches=13", "min_checkpoint_period.batches=13"});
  RecordingTrial::evaluated_at().clear();
  fit_recording(config, tmp / "run");
  using P = RecordingTrial::Position;
  const P after_epoch{13, 1, true, true};
  const P mid_epoch{20, 1, false, false};
  std::vector<P> expected(7, after_epoch);
  expected.insert(expected.end(), 7, mid_epoch);
  CHECK(RecordingTrial::evaluated_at() == expected);
  // Inside train_batch: the batch being trained, and whether it starts or ends its epoch.
  for (const auto& call : RecordingTrial::calls()) {
    CHECK(call.recorded_batch == call.batch_idx);
    CHECK(call.epoch_start == (call.batch_idx % 13 == 0));
    CHECK(call.epoch_end == (call.batch_idx % 13 == 12));
  }
  // trainer validate: the batches the checkpoint was trained for, and their epoch.
  crucible::Trainer trainer(config, crucible::TrialFactory::of<RecordingTrial>("RecordingTrial"));
  for (const P& at : {after_epoch, mid_epoch}) {
    RecordingTrial::evaluated_at().clear();
    trainer.validate(tmp / fmt::format("run/checkpoints/batch-{:010d}", at.batch));
    CHECK(RecordingTrial::evaluated_at() == std::vector<P>(7, at));
  }
}

TEST_CASE("two validation metrics that get one name fail, naming both", "[train]") {
  TempDir tmp;
  for (const std::string name : {"validation_avg_x", "validation_z", "z"}) {
    INFO(name);
    // "z" and "validation_z" alone are distinct names: only the first clashes (with avg_x).
    auto config =
        recording_config("max_length: {batches: 5}\n", {"hyperparameters.also_report=" + name});
    if (name != "validation_avg_x") {
      CHECK(fit_recording(config, tmp / name).batches_trained == 5);
      continue;
    }
    CHECK_THAT(error_of([&] { fit_recording(config, tmp / name); }),
               Catch::Contains("the validation metrics 'avg_x' and 'validation_avg_x' are both "
                               "reported as 'validation_avg_x'"));
  }
}
