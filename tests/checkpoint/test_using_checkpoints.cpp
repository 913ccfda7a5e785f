// Warm start, trainer validate / predict, and reading the predictions from Python.
#include <cstdio>

#include "catch.h"

#include "checkpoint/checkpoint.h"
#include "resumable_run.h"

using namespace crucible::testing;

namespace {

// The Fashion-MNIST CNN fitted for `batches` batches into <tmp>/run with `args`, the last
// validation metrics of its metrics.jsonl, and what `trainer validate` and `trainer predict`
// (into <tmp>/p.pt) of its final checkpoint print.
struct UsedCheckpoint {
  std::string checkpoint;
  nlohmann::json fit_metrics;
  nlohmann::json validated;
  std::string predicted;
};

UsedCheckpoint fit_and_use(const TempDir& tmp, int batches, const std::string& args = "") {
  const std::string run = tmp / "run";
  auto fit =
      run_command(kTrainer + " fit " + kConfigs + "/fashion_mnist_test_mode.yaml --quiet " + args +
                  " --set max_length.batches=" + std::to_string(batches) + " --output " + run);
  INFO(fit.output);
  REQUIRE(fit.exit_code == 0);
  UsedCheckpoint used;
  used.checkpoint = run + "/checkpoints/" + fmt::format("batch-{:010d}", batches);
  used.fit_metrics = read_metrics(run + "/metrics.jsonl").back()["metrics"];
  auto validate = run_command(kTrainer + " validate --checkpoint " + used.checkpoint);
  INFO(validate.output);
  REQUIRE(validate.exit_code == 0);
  used.validated = nlohmann::json::parse(validate.output);
  auto predict = run_command(kTrainer + " predict --checkpoint " + used.checkpoint + " --output " +
                             (tmp / "p.pt"));
  INFO(predict.output);
  REQUIRE(predict.exit_code == 0);
  used.predicted = predict.output;
  return used;
}

// What Python sees comparing prediction files a and b (torch.load with weights_only):
// "shape [..] equal <bool> close <bool>", b's shape, close within 1e-6.
std::string compare_predictions(const TempDir& tmp, const std::string& a, const std::string& b) {
  const std::string script = tmp / "compare.py";
  write_file(script, R"(import sys, torch
a, b = (torch.load(f, weights_only=True)["predictions"] for f in sys.argv[1:3])
print("shape", list(b.shape), "equal", torch.equal(a, b), "close", torch.allclose(a, b, atol=1e-6))
)");
  auto py = run_command(kPython + " " + script + " " + a + " " + b);
  INFO(py.output);
  CHECK(py.exit_code == 0);
  return py.output;
}

}  // namespace

TEST_CASE("the Fashion-MNIST CNN checkpoint: validate, predict, and Python reads it",
          "[checkpoint]") {
  TempDir tmp;
  const UsedCheckpoint used = fit_and_use(tmp, 40);
  CHECK(used.validated["validation_accuracy"] == used.fit_metrics["validation_accuracy"]);
  CHECK(used.validated["validation_accuracy"].get<double>() > 0.5);
  CHECK_THAT(used.predicted, Catch::Contains("wrote 10000 predictions"));
  // Predictions never replace a file of the run, and the run's files stay as they were.
  const std::string metrics = read_file(tmp / "run/metrics.jsonl");
  for (const std::string& output : {tmp / "run/metrics.jsonl", used.checkpoint + "/model_0.pt"}) {
    auto refused =
        run_command(kTrainer + " predict --checkpoint " + used.checkpoint + " --output " + output);
    CHECK(refused.exit_code == 2);
    CHECK_THAT(refused.output, Catch::Contains("--output " + output + ": a file of the run"));
  }
  CHECK(read_file(tmp / "run/metrics.jsonl") == metrics);

  const std::string script = tmp / "read.py";
  write_file(script, R"(import sys, torch
weights = torch.load(sys.argv[1], weights_only=True)
print({k: list(v.shape) for k, v in sorted(weights.items())})
p = torch.load(sys.argv[2], weights_only=True)["predictions"]
print(list(p.shape), round(float(p.sum(1).mean()), 4))
)");
  auto py =
      run_command(kPython + " " + script + " " + used.checkpoint + "/model_0.pt " + (tmp / "p.pt"));
  INFO(py.output);
  REQUIRE(py.exit_code == 0);
  CHECK_THAT(py.output, Catch::Contains("'conv1.weight': [8, 1, 3, 3]") &&
                            Catch::Contains("'out.bias': [10]") &&
                            Catch::Contains("[10000, 10] 1.0"));
}

TEST_CASE(
    "a checkpoint of a 2-slot run validates and predicts in one process, and with --slots 2 "
    "in two",
    "[checkpoint]") {
  TempDir tmp;
  const UsedCheckpoint used = fit_and_use(tmp, 10, "--slots 2");
  // The two ranks' validation, reduced exactly, is the one process's.
  CHECK(used.validated["validation_accuracy"].get<double>() ==
        Approx(used.fit_metrics["validation_accuracy"].get<double>()).epsilon(1e-6));
  CHECK_THAT(used.predicted, Catch::Contains("wrote 10000 predictions"));

  // Two processes: rank 0's JSON alone on stdout, the same metrics.
  auto validate = run_command(kTrainer + " validate --slots 2 --checkpoint " + used.checkpoint +
                              " > " + (tmp / "two.json"));
  INFO(validate.output);
  REQUIRE(validate.exit_code == 0);
  const auto two = nlohmann::json::parse(read_file(tmp / "two.json"));
  for (const auto& [name, value] : used.validated.items()) {
    CHECK(two.at(name).get<double>() == Approx(value.get<double>()).epsilon(1e-6));
  }
  auto predict = run_command(kTrainer + " predict --slots 2 --checkpoint " + used.checkpoint +
                             " --output " + (tmp / "p2.pt"));
  INFO(predict.output);
  REQUIRE(predict.exit_code == 0);
  CHECK(predict.output == "wrote 10000 predictions to " + (tmp / "p2.pt") + "\n");
  // The rows in the loader's order: rank 1's batches between rank 0's.
  const std::string compared = compare_predictions(tmp, tmp / "p.pt", tmp / "p2.pt");
  CHECK_THAT(compared, Catch::Contains("shape [10000, 10]") && Catch::Contains("close True"));

  // A run named for --checkpoint: the checkpoint it resolves to is said once, by the process
  // the user started, not again by the worker of rank 0.
  const std::string run = used.checkpoint.substr(0, used.checkpoint.find("/checkpoints/"));
  auto by_run = run_command(kTrainer + " validate --slots 2 --checkpoint " + run);
  INFO(by_run.output);
  REQUIRE(by_run.exit_code == 0);
  const std::string said = "--checkpoint " + run + ": checkpoint " + used.checkpoint + "\n";
  const size_t at = by_run.output.find(said);
  CHECK(at != std::string::npos);
  CHECK(by_run.output.find(said, at + 1) == std::string::npos);
  CHECK(by_run.output.find("[rank 0] --checkpoint") == std::string::npos);

  auto uneven = run_command(kTrainer + " validate --slots 3 --checkpoint " + used.checkpoint);
  CHECK(uneven.exit_code == 2);
  CHECK_THAT(uneven.output, Catch::Contains("evaluating on 3 slots") &&
                                Catch::Contains("global_batch_size (32) is not a multiple of 3"));
}

TEST_CASE("with more slots than batches, the slots without a batch validate and predict nothing",
          "[checkpoint]") {
  TempDir tmp;
  // 10 validation samples: one batch of 32 in one process, of 16 with 2, so rank 1 has none.
  auto fit =
      run_command(kTrainer + " fit " + kConfigs + "/linear.yaml --quiet --output " + (tmp / "run") +
                  " --set hyperparameters.validation_samples=10 --set max_length.batches=5");
  INFO(fit.output);
  REQUIRE(fit.exit_code == 0);
  const std::string ckpt = tmp / "run/checkpoints/batch-0000000005";
  nlohmann::json metrics[2];
  for (int slots : {1, 2}) {
    auto v = run_command(kTrainer + " validate --slots " + std::to_string(slots) +
                         " --checkpoint " + ckpt + " > " + (tmp / "v.json"));
    INFO(v.output);
    REQUIRE(v.exit_code == 0);
    metrics[slots - 1] = nlohmann::json::parse(read_file(tmp / "v.json"));
    auto p = run_command(kTrainer + " predict --slots " + std::to_string(slots) + " --checkpoint " +
                         ckpt + " --output " + (tmp / ("p" + std::to_string(slots) + ".pt")));
    INFO(p.output);
    REQUIRE(p.exit_code == 0);
    CHECK_THAT(p.output, Catch::Contains("wrote 10 predictions"));
  }
  CHECK(metrics[1]["validation_loss"].get<double>() ==
        Approx(metrics[0]["validation_loss"].get<double>()).epsilon(1e-6));
  CHECK_THAT(compare_predictions(tmp, tmp / "p1.pt", tmp / "p2.pt"),
             Catch::Contains("shape [10, 1] equal True"));
}

TEST_CASE(
    "evaluate_full_dataset and predict_batch run under bf16 autocast as evaluate_batch does, on "
    "1 and 2 slots",
    "[checkpoint]") {
  TempDir tmp;
  write_file(tmp / "full.yaml", R"(name: full
entrypoint: crucible_test_trials:FullDatasetTrial
hyperparameters: {global_batch_size: 8, records: 40, validation_records: 25, validation_batch_size: 4}
searcher: {name: single, metric: validation_records, smaller_is_better: false}
max_length: {batches: 4}
)");
  const std::string python = tmp / "dtype.py";
  write_file(python, R"(import sys, torch
p = torch.load(sys.argv[1], weights_only=True)["predictions"]
print(list(p.shape), p.dtype)
)");
  for (const std::string precision : {"none", "bf16"}) {
    for (const int slots : {1, 2}) {
      const std::string run = tmp / (precision + std::to_string(slots));
      // validate and predict take the precision from the checkpoint's config.
      const std::string where = " --slots " + std::to_string(slots);
      INFO(where << " " << precision);
      auto fit = run_command(kTrainer + " fit " + (tmp / "full.yaml") + " --quiet --output " + run +
                             where + " --set optimizations.mixed_precision=" + precision);
      INFO(fit.output);
      REQUIRE(fit.exit_code == 0);
      const nlohmann::json fitted = read_metrics(run + "/metrics.jsonl").back()["metrics"];
      const nlohmann::json expected = {{"validation_records", 25.0},
                                       {"validation_sum_x", 300.0},
                                       {"validation_autocast", precision == "bf16" ? 1.0 : 0.0}};
      CHECK(fitted == expected);
      const std::string checkpoint = run + "/checkpoints/batch-0000000004";
      auto validate = run_command(kTrainer + " validate --checkpoint " + checkpoint + where);
      INFO(validate.output);
      REQUIRE(validate.exit_code == 0);
      CHECK(nlohmann::json::parse(validate.output) == expected);
      auto predict = run_command(kTrainer + " predict --checkpoint " + checkpoint + " --output " +
                                 (run + ".pt") + where);
      INFO(predict.output);
      REQUIRE(predict.exit_code == 0);
      auto py = run_command(kPython + " " + python + " " + run + ".pt");
      INFO(py.output);
      CHECK(py.output ==
            (precision == "bf16" ? "[25, 1] torch.bfloat16\n" : "[25, 1] torch.float32\n"));
    }
  }
}

TEST_CASE("warm start loads weights only: mismatches are listed", "[checkpoint]") {
  TempDir tmp;
  auto base = run_command(kTrainer + " fit " + kConfigs + "/linear.yaml --quiet --output " +
                          (tmp / "base"));
  REQUIRE(base.exit_code == 0);
  const std::string ckpt = tmp / "base/checkpoints/batch-0000000252";
  const std::string warm_command = kTrainer + " fit " + kConfigs + "/linear.yaml --output " +
                                   (tmp / "warm") + " --warm-start " + ckpt +
                                   " --set perform_initial_validation=true --set "
                                   "max_length.batches=1";
  auto warm = run_command(warm_command);
  INFO(warm.output);
  REQUIRE(warm.exit_code == 0);
  // Requeued, the command continues its run, which needs its source no more.
  REQUIRE(::rename((tmp / "base").c_str(), (tmp / "moved").c_str()) == 0);
  auto requeued = run_command(warm_command);
  INFO(requeued.output);
  CHECK(requeued.exit_code == 0);
  CHECK_THAT(requeued.output, Catch::Contains("holds a run of this config: continuing it"));
  REQUIRE(::rename((tmp / "moved").c_str(), (tmp / "base").c_str()) == 0);
  const auto rows = read_metrics(tmp / "warm/metrics.jsonl");
  REQUIRE(rows.front()["type"] == "validation");
  CHECK(rows.front()["batches"] == 0);  // counters fresh
  CHECK(rows.front()["metrics"]["validation_weight"].get<double>() == Approx(2.5).margin(0.03));
  // A run directory or its latest file names its newest checkpoint.
  for (const std::string& given : {tmp / "base", tmp / "base/latest"}) {
    auto from_run =
        run_command(kTrainer + " fit " + kConfigs + "/linear.yaml --output " + (tmp / "warm2") +
                    " --warm-start " + given + " --set max_length.batches=1");
    INFO(from_run.output);
    CHECK(from_run.exit_code == 0);
    CHECK_THAT(from_run.output, Catch::Contains("model weights from " + ckpt));
    crucible::util::remove_all(tmp / "warm2");
  }
  // One that names nothing fails before the run directory is made.
  auto nowhere = run_command(kTrainer + " fit " + kConfigs + "/linear.yaml --output " +
                             (tmp / "warm3") + " --warm-start " + (tmp / "nowhere"));
  CHECK(nowhere.exit_code == 2);
  CHECK_THAT(nowhere.output,
             Catch::Contains("--warm-start " + (tmp / "nowhere") + ": no such file or directory"));
  CHECK(!crucible::util::exists(tmp / "warm3"));

  auto mismatch = run_command(kTrainer + " fit " + kConfigs +
                              "/fashion_mnist_test_mode.yaml --test-mode --output " +
                              (tmp / "bad") + " --warm-start " + ckpt);
  CHECK(mismatch.exit_code == 1);
  CHECK_THAT(mismatch.output, Catch::Contains("does not match the model") &&
                                  Catch::Contains("missing conv1.weight [8, 1, 3, 3]") &&
                                  Catch::Contains("unexpected weight [1, 1]"));
}

TEST_CASE(
    "searcher.source_trial_id and source_checkpoint_uuid warm start a new run, not a resumed one",
    "[checkpoint]") {
  TempDir tmp;
  auto base = run_command(kTrainer + " fit " + kConfigs + "/linear.yaml --quiet --output " +
                          (tmp / "base"));
  REQUIRE(base.exit_code == 0);
  const std::string ckpt = tmp / "base/checkpoints/batch-0000000252";
  const std::string first = " --set perform_initial_validation=true --set max_length.batches=1";
  // Determined's keys, here paths: the run's newest good checkpoint, or a checkpoint.
  for (const std::string& source :
       {"source_trial_id=" + (tmp / "base"), "source_checkpoint_uuid=" + ckpt}) {
    INFO(source);
    const std::string out = tmp / ("warm-" + source.substr(0, source.find('=')));
    auto warm = run_command(kTrainer + " fit " + kConfigs + "/linear.yaml --output " + out +
                            " --set searcher." + source + first);
    INFO(warm.output);
    REQUIRE(warm.exit_code == 0);
    CHECK_THAT(warm.output, Catch::Contains("model weights from " + ckpt));
    const auto rows = read_metrics(out + "/metrics.jsonl");
    REQUIRE(rows.front()["type"] == "validation");
    CHECK(rows.front()["metrics"]["validation_weight"].get<double>() == Approx(2.5).margin(0.03));
    // Continued from its own checkpoint, the run keeps its weights.
    auto more = run_command(kTrainer + " fit --resume " + out +
                            " --set max_length.batches=2 --allow-safe-changes");
    INFO(more.output);
    REQUIRE(more.exit_code == 0);
    CHECK_THAT(more.output, !Catch::Contains("model weights from"));
  }
  auto missing =
      run_command(kTrainer + " fit " + kConfigs + "/linear.yaml --output " + (tmp / "missing") +
                  " --set searcher.source_trial_id=" + (tmp / "nowhere") + first);
  CHECK(missing.exit_code == 2);
  CHECK_THAT(missing.output, Catch::Contains("searcher.source_trial_id: " + (tmp / "nowhere") +
                                             " is not a run directory: no such directory;"));
  // A directory that holds no run is named as such.
  auto empty = run_command(kTrainer + " check " + kConfigs +
                           "/linear.yaml --set searcher.source_trial_id=" + tmp.path());
  CHECK(empty.exit_code == 2);
  CHECK_THAT(empty.output, Catch::Contains("searcher.source_trial_id: " + tmp.path() +
                                           " is not a run directory (no config.yaml in it)"));
  CHECK(!crucible::util::exists(tmp / "missing"));  // refused before the run directory is made
  // trainer check agrees, for both keys.
  for (const std::string key : {"source_trial_id", "source_checkpoint_uuid"}) {
    auto checked = run_command(kTrainer + " check " + kConfigs + "/linear.yaml --set searcher." +
                               key + "=" + (tmp / "nowhere"));
    CHECK(checked.exit_code == 2);
    CHECK_THAT(checked.output,
               Catch::Contains("searcher." + key + ": " + (tmp / "nowhere") + " is not a"));
  }
  auto both = run_command(kTrainer + " check " + kConfigs + "/linear.yaml --set " +
                          "searcher.source_trial_id=a --set searcher.source_checkpoint_uuid=b");
  CHECK(both.exit_code == 2);
  CHECK_THAT(both.output, Catch::Contains("searcher.source_checkpoint_uuid") &&
                              Catch::Contains("give source_trial_id or source_checkpoint_uuid, "
                                              "not both"));
}

TEST_CASE("trainer validate and predict refuse what they cannot use", "[checkpoint]") {
  TempDir tmp;
  auto missing = run_command(kTrainer + " validate --checkpoint /nonexistent/ckpt");
  CHECK(missing.exit_code == 2);
  CHECK_THAT(missing.output,
             Catch::Contains("--checkpoint /nonexistent/ckpt: no such file or directory"));
  auto neither = run_command(kTrainer + " validate --checkpoint " + tmp.path());
  CHECK(neither.exit_code == 2);
  CHECK_THAT(neither.output, Catch::Contains("--checkpoint " + tmp.path() +
                                             ": neither a checkpoint (no metadata.json), a run"));
  write_file(tmp / "notes.txt", "mine\n");
  auto file = run_command(kTrainer + " validate --checkpoint " + (tmp / "notes.txt"));
  CHECK(file.exit_code == 2);
  CHECK_THAT(file.output, Catch::Contains("--checkpoint " + (tmp / "notes.txt") +
                                          ": a file, not a checkpoint, run or experiment "
                                          "directory (nor a run's latest,"));
  write_file(tmp / "config.yaml", "name: x\n");
  // A run's own file: its directory is meant.
  auto run_file = run_command(kTrainer + " validate --checkpoint " + (tmp / "config.yaml"));
  CHECK(run_file.exit_code == 2);
  CHECK_THAT(run_file.output, Catch::Contains("--checkpoint " + (tmp / "config.yaml") +
                                              ": a file, not a checkpoint, run or experiment "
                                              "directory; give the directory it is in, " +
                                              tmp.path()));
  auto no_checkpoint = run_command(kTrainer + " predict --checkpoint " + tmp.path());
  CHECK(no_checkpoint.exit_code == 2);
  CHECK_THAT(no_checkpoint.output, Catch::Contains("no checkpoint"));
  // An experiment without a best checkpoint yet, then with a best file that names none.
  write_file(tmp / "experiment.jsonl", "");
  auto no_best = run_command(kTrainer + " validate --checkpoint " + tmp.path());
  CHECK(no_best.exit_code == 2);
  CHECK_THAT(no_best.output, Catch::Contains("the experiment has no best checkpoint yet"));
  write_file(tmp / "best", "trials/1/checkpoints/batch-0000000016\n");
  auto dangling = run_command(kTrainer + " validate --checkpoint " + (tmp / "best"));
  CHECK(dangling.exit_code == 2);
  CHECK_THAT(dangling.output,
             Catch::Contains(tmp / "best" + " names " + tmp.path() +
                             "/trials/1/checkpoints/batch-0000000016, which is not a checkpoint"));
  auto no_flag = run_command(kTrainer + " predict");
  CHECK(no_flag.exit_code == 2);
  CHECK_THAT(no_flag.output, Catch::Contains("--checkpoint DIR is required"));
}
