// End-to-end tests of the real `trainer` binary on real configs.
#include <regex>
#include <sstream>

#include "catch.h"

#include <crucible/errors.h>

#include "process.h"
#include "text.h"

using namespace crucible::testing;

namespace {

CommandResult trainer(const std::string& args) { return run_command(kTrainer + " " + args); }

// An experiment file in `dir` for a trial of the test library.
std::string test_config(const TempDir& dir, const std::string& trial,
                        const std::string& extra = "") {
  const std::string path = dir / (trial + ".yaml");
  write_file(path, "name: cli\nentrypoint: crucible_test_trials:" + trial + R"(
hyperparameters: {global_batch_size: 8, records: 40, validation_records: 10, validation_batch_size: 5}
max_length: {batches: 10}
checkpoint_storage: {host_path: )" +
                       dir.str() + "/runs}\n" + extra);
  return path;
}

// One "error: " message at the start of a line, and no stack trace.
void check_one_clean_error(const CommandResult& r) {
  const auto pos = r.output.find("error: ");
  REQUIRE(pos != std::string::npos);
  CHECK((pos == 0 || r.output[pos - 1] == '\n'));
  CHECK(r.output.find("error: ", pos + 1) == std::string::npos);
  CHECK_THAT(r.output, !Catch::Contains("Exception raised from"));
  CHECK_THAT(r.output, !Catch::Contains("terminate called"));
}

}  // namespace

TEST_CASE("trainer --version, --help and bad usage", "[cli]") {
  auto version = trainer("--version");
  CHECK(version.exit_code == 0);
  CHECK_THAT(version.output, Catch::StartsWith("trainer (Crucible) 0.1.0, LibTorch "));
  CHECK(trainer("--help").exit_code == 0);
  auto fit_help = trainer("fit --help");
  CHECK(fit_help.exit_code == 0);
  CHECK_THAT(fit_help.output, Catch::Contains("--test-mode"));
  CHECK_THAT(trainer("check --help").output, Catch::Contains("usage: trainer check CONFIG"));
  CHECK(trainer("").exit_code == 2);
  auto unknown = trainer("frobnicate x.yaml");
  CHECK(unknown.exit_code == 2);
  CHECK(unknown.output ==
        "error: unknown command 'frobnicate'; commands: fit, check, validate, predict, report, "
        "keys\n");
  auto bad_flag = trainer("fit " + kConfigs + "/linear.yaml --fast");
  CHECK(bad_flag.exit_code == 2);
  CHECK_THAT(bad_flag.output, Catch::Contains("unknown option '--fast' for fit"));
  CHECK(trainer("fit").exit_code == 2);
  // --set=KEY=VALUE, as every other option takes --flag=value.
  auto set_equals = trainer("check " + kConfigs + "/linear.yaml --set=hyperparameters.noise=0.25");
  CHECK(set_equals.exit_code == 0);
  CHECK_THAT(set_equals.output, Catch::Contains("noise: 0.25"));
  // An empty value (an unset shell variable) or another option where a value belongs is refused,
  // not taken as "none" or as a directory named --quiet.
  for (const std::string& args : {std::string(" --warm-start ''"), std::string(" --warm-start="),
                                  std::string(" --output ''")}) {
    INFO(args);
    auto empty = trainer("fit " + kConfigs + "/linear.yaml" + args);
    CHECK(empty.exit_code == 2);
    CHECK_THAT(empty.output, Catch::Contains("needs a value, and it is empty"));
  }
  auto option = trainer("fit " + kConfigs + "/linear.yaml --output --quiet");
  CHECK(option.exit_code == 2);
  CHECK_THAT(option.output,
             Catch::Contains("--output needs a value, and '--quiet' is an option; a value that "
                             "starts with -- is written --output=--quiet"));
  // --set KEY VALUE, as two arguments: the fix is named.
  const auto refused = [](const std::string& args) {
    const auto r = trainer(args);
    CHECK(r.exit_code == 2);
    return r.output;
  };
  const std::string linear = kConfigs + "/linear.yaml";
  for (const std::string& args : {"check " + linear + " --set hyperparameters.noise 0.25",
                                  "check --set hyperparameters.noise 0.25 " + linear}) {
    CHECK(refused(args) ==
          "error: --set takes KEY=VALUE as one argument: --set hyperparameters.noise=0.25\n");
  }
  CHECK(refused("check " + linear + " other.yaml") == "error: unexpected argument 'other.yaml'\n");
  // An option with a value given twice is refused, not settled by its last: only --set repeats.
  CHECK(refused("fit " + linear + " --output a --output=b") ==
        "error: --output is given twice; give it once\n");
  CHECK(refused("fit --resume x " + linear + " --resume x") ==
        "error: --resume is given twice; give it once\n");
  CHECK(refused("check") == "error: trainer check needs a CONFIG file\n");
  CHECK_THAT(refused("fit " + linear + " --resume somewhere"),
             Catch::Contains("error: trainer fit needs exactly one of CONFIG and --resume"));
  CHECK(refused("keys " + linear) ==
        "error: unexpected argument '" + linear + "'; trainer keys takes no CONFIG\n");
  CHECK(refused("validate --checkpoint somewhere " + linear) ==
        "error: unexpected argument '" + linear +
            "'; trainer validate takes no CONFIG: its checkpoint's config is used (--checkpoint "
            "CKPT)\n");
}

TEST_CASE("trainer fit trains the linear trial to the known weight", "[cli]") {
  TempDir tmp;
  auto r = trainer("fit " + kConfigs + "/linear.yaml --output " + (tmp / "run"));
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("[validation]"));
  auto rows = read_metrics(tmp / "run/metrics.jsonl");
  const auto& last = rows.back();
  REQUIRE(last["type"] == "validation");
  CHECK(last["batches"] == 252);
  CHECK(last["metrics"]["validation_weight"].get<double>() == Approx(2.5).margin(0.03));
  CHECK(last["metrics"]["validation_bias"].get<double>() == Approx(-0.7).margin(0.03));
  CHECK(last["metrics"]["validation_loss"].get<double>() < 0.02);  // noise variance is 0.01
  CHECK(util::exists(tmp / "run/config.yaml"));
  CHECK(util::exists(tmp / "run/trainer.log"));
  CHECK(util::exists(tmp / "run/checkpoints/batch-0000000252/model_0.pt"));
  CHECK(util::exists(tmp / "run/checkpoints/batch-0000000252/metadata.json"));
}

TEST_CASE("the same config and seed give the same metrics", "[cli]") {
  TempDir tmp;
  REQUIRE(trainer("fit " + kConfigs + "/linear.yaml --quiet --output " + (tmp / "a")).exit_code ==
          0);
  REQUIRE(trainer("fit " + kConfigs + "/linear.yaml --quiet --output " + (tmp / "b")).exit_code ==
          0);
  CHECK(read_file(tmp / "a/metrics.jsonl") == read_file(tmp / "b/metrics.jsonl"));
  REQUIRE(trainer("fit " + kConfigs +
                  "/linear.yaml --quiet --set reproducibility.experiment_seed=8 --output " +
                  (tmp / "c"))
              .exit_code == 0);
  CHECK(read_file(tmp / "a/metrics.jsonl") != read_file(tmp / "c/metrics.jsonl"));
}

TEST_CASE("trainer fit --resume continues a run from its latest checkpoint", "[cli]") {
  TempDir tmp;
  REQUIRE(trainer("fit " + kConfigs +
                  "/linear.yaml --quiet --set checkpoint_storage.save_trial_latest=5 --output " +
                  (tmp / "run"))
              .exit_code == 0);
  const std::string full = read_file(tmp / "run/metrics.jsonl");
  util::remove_all(tmp / "run/checkpoints/batch-0000000252");
  auto r = trainer("fit --resume " + (tmp / "run"));
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("continuing from") && Catch::Contains("at batch 126"));
  CHECK(read_file(tmp / "run/metrics.jsonl") == full);
  CHECK(trainer("fit --resume " + (tmp / "nothing")).exit_code == 2);
  auto with_output = trainer("fit --resume " + (tmp / "run") + " --output " + (tmp / "x"));
  CHECK(with_output.exit_code == 2);
  CHECK_THAT(with_output.output, Catch::Contains("--output cannot be combined with it"));
  // Refused before any process starts: other slots, safe changes with nothing to resume, an
  // --output that is a file or a directory of other files.
  const auto refused = [&](const std::string& args, const std::string& message) {
    auto r = trainer("fit " + args);
    INFO(r.output);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Catch::Contains(message) && !Catch::Contains("[rank 1]"));
  };
  refused("--resume " + (tmp / "run") + " --slots 2",
          "the run trains on 1 slot (resources.slots_per_trial) and --slots asks for 2");
  refused(kConfigs + "/linear.yaml --allow-safe-changes --output " + (tmp / "y"),
          "--allow-safe-changes accepts changes to a run on --resume RUN_DIR");
  write_file(tmp / "notes.txt", "mine\n");
  refused(kConfigs + "/linear.yaml --output " + (tmp / "notes.txt"),
          "--output " + (tmp / "notes.txt") + ": a file, not a directory");
  refused(kConfigs + "/linear.yaml --output " + tmp.path(),
          "--output " + tmp.path() + ": the directory holds other files");
  refused(kConfigs + "/linear.yaml --output " + (tmp / "notes.txt/run"),
          "--output " + (tmp / "notes.txt/run") + ": " + (tmp / "notes.txt") +
              " is a file, not a directory");
  // No --output: the run goes under checkpoint_storage.host_path, which a file blocks. The
  // error names the key where it was given, a search's as a single run's.
  for (const std::string searcher : {"", " --set searcher.name=grid --set searcher.max_trials=1"}) {
    refused(kConfigs + "/linear.yaml --set checkpoint_storage.host_path=" + (tmp / "notes.txt") +
                searcher,
            "--set checkpoint_storage.host_path=" + (tmp / "notes.txt") +
                ": checkpoint_storage.host_path: " + (tmp / "notes.txt") +
                " is a file, not a directory; runs are written in <host_path>/<name>/");
  }
  CHECK(read_file(tmp / "notes.txt") == "mine\n");
  CHECK(!util::exists(tmp / "y"));
  // A project directory whose experiment file is named config.yaml holds no run: neither
  // --resume nor --output writes into it.
  const std::string project = tmp / "project";
  util::create_directories(project + "/src");
  write_file(project + "/config.yaml", read_file(kConfigs + "/linear.yaml"));
  write_file(project + "/README.md", "mine\n");
  refused("--resume " + project, "--resume " + project +
                                     ": not a run directory (beside its config.yaml it holds "
                                     "other files (");
  refused(project + "/config.yaml --output " + project,
          "--output " + project + ": the directory holds other files (");
  // Nor does a report.
  const auto report = trainer("report " + project);
  CHECK(report.exit_code == 2);
  CHECK_THAT(report.output,
             Catch::Contains("error: " + project +
                             " holds no run or experiment: beside its config.yaml it holds other "
                             "files ("));
  CHECK(util::list_directory(project) ==
        std::vector<std::string>{"README.md", "config.yaml", "src"});
}

TEST_CASE("a run killed while its directory was made starts again with the same --output",
          "[cli]") {
  // What a SIGKILL leaves while create_run_dir writes: the lock, the checkpoints directory, the
  // trial library's pointer, and the temporaries of the next files written atomically.
  TempDir tmp;
  const std::string run = tmp / "run";
  util::create_directories(run + "/checkpoints");
  write_file(run + "/.lock", "");
  write_file(run + "/trial_library", "/elsewhere/libgone.so\n");
  write_file(run + "/trial_library.tmp", "/elsewhere/libg");
  write_file(run + "/config.yaml.tmp", "name: lin");
  const auto resume = trainer("fit --resume " + run);
  CHECK(resume.exit_code == 2);
  CHECK_THAT(resume.output, Catch::Contains("not a run directory (no config.yaml in it)"));
  const auto again = trainer("fit " + kConfigs + "/linear.yaml --quiet --output " + run);
  INFO(again.output);
  CHECK(again.exit_code == 0);
  CHECK(util::exists(run + "/checkpoints/batch-0000000252"));
  for (const auto& name : util::list_directory(run)) CHECK(name.find(".tmp") == std::string::npos);
  // Another temporary is still the user's file: refused.
  util::create_directories(tmp / "fresh");
  write_file(tmp / "fresh/notes.tmp", "mine\n");
  const auto foreign =
      trainer("fit " + kConfigs + "/linear.yaml --quiet --output " + (tmp / "fresh"));
  CHECK(foreign.exit_code == 2);
  CHECK_THAT(foreign.output, Catch::Contains("the directory holds other files (notes.tmp"));
}

TEST_CASE("a run remembers its trial library, and host_path is relative to the config's directory",
          "[cli]") {
  // A user's project: an experiment file beside its own trial library, found by name only
  // from the file's directory (not the trainer's).
  TempDir tmp;
  const std::string project = tmp / "project";
  const std::string library = project + "/libmy_linear.so";
  REQUIRE(run_command("mkdir -p " + project + " && cp " + std::string(CRUCIBLE_BIN_DIR) +
                      "/liblinear.so " + library)
              .exit_code == 0);
  std::string yaml = read_file(kConfigs + "/linear.yaml");
  yaml = std::regex_replace(yaml, std::regex("entrypoint: linear:"), "entrypoint: my_linear:");
  yaml = std::regex_replace(yaml, std::regex("host_path: \\.\\./runs"), "host_path: runs");
  REQUIRE(yaml.find("host_path: runs}") != std::string::npos);
  write_file(project + "/experiment.yaml", yaml);

  // Started from elsewhere, the run lands in <project>/runs/linear/<run-id>.
  auto fit = run_command("cd " + tmp.str() + " && " + kTrainer + " fit " + project +
                         "/experiment.yaml --quiet");
  INFO(fit.output);
  REQUIRE(fit.exit_code == 0);
  const auto runs = util::list_directory(project + "/runs/linear");
  REQUIRE(runs.size() == 1);
  const std::string run = project + "/runs/linear/" + runs[0];
  CHECK(read_file(run + "/trial_library") == library + "\n");

  // From any working directory: the run's directory names the library.
  auto validate = run_command("cd / && " + kTrainer + " validate --checkpoint " + run +
                              "/checkpoints/batch-0000000252");
  INFO(validate.output);
  CHECK(validate.exit_code == 0);
  CHECK_THAT(validate.output, Catch::Contains("validation_loss"));
  auto resume = run_command("cd / && " + kTrainer + " fit --resume " + run + " --quiet");
  INFO(resume.output);
  CHECK(resume.exit_code == 0);
  // Without the record the library is not found, and the message lists where it was looked for.
  util::remove(run + "/trial_library");
  auto lost = run_command("cd / && " + kTrainer + " fit --resume " + run);
  CHECK(lost.exit_code == 3);
  CHECK_THAT(lost.output, Catch::Contains("trial library 'my_linear' not found"));
}

TEST_CASE("trainer check prints the resolved config", "[cli]") {
  auto r = trainer("check " + kConfigs + "/linear.yaml --set hyperparameters.learning_rate=0.1");
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("OK (trial LinearTrial)"));
  CHECK_THAT(r.output, Catch::Contains("learning_rate: 0.1\n"));
  CHECK_THAT(r.output, Catch::Contains("perform_initial_validation: false"));
}

TEST_CASE("trainer keys lists every key with its default and resume safety", "[cli]") {
  auto r = trainer("keys");
  REQUIRE(r.exit_code == 0);
  INFO(r.output);
  // The line of `key`, its columns separated by runs of spaces.
  auto line_of = [&](const std::string& key) {
    std::istringstream in(r.output);
    for (std::string line; std::getline(in, line);) {
      if (line.rfind(key + " ", 0) == 0) return std::regex_replace(line, std::regex(" {2,}"), "|");
    }
    return std::string("(no line for " + key + ")");
  };
  CHECK(line_of("name") ==
        "name|required|-|the experiment's name (a directory under host_path holds its runs)");
  // Safe on a run's resume, not on a search's.
  CHECK_THAT(line_of("max_length"), Catch::StartsWith("max_length|required|run|how long"));
  CHECK_THAT(line_of("resources.slots_per_trial"),
             Catch::StartsWith("resources.slots_per_trial|1|-|processes"));
  CHECK_THAT(line_of("min_checkpoint_period"),
             Catch::StartsWith("min_checkpoint_period|{batches: 0}|safe|"));
  CHECK_THAT(line_of("checkpoint_policy"), Catch::StartsWith("checkpoint_policy|best|-|best: "));
  CHECK_THAT(line_of("optimizations.gradient_as_bucket_view"),
             Catch::StartsWith("optimizations.gradient_as_bucket_view|true|safe|"));
  CHECK(trainer("keys extra").exit_code == 2);
}

TEST_CASE("config errors exit 2 with file, line and column", "[cli]") {
  auto r = trainer("check " + std::string(CRUCIBLE_TEST_DATA) + "/config/bad/unknown_top_key.yaml");
  CHECK(r.exit_code == 2);
  check_one_clean_error(r);
  CHECK_THAT(r.output, Catch::Contains("unknown_top_key.yaml:6:1: max_lenght: unknown key"));
  auto missing = trainer("fit /nonexistent/config.yaml");
  CHECK(missing.exit_code == 2);
  CHECK_THAT(missing.output, Catch::Contains("/nonexistent/config.yaml: cannot open"));
  auto bad_set = trainer("fit " + kConfigs + "/linear.yaml --set max_length.epochs=-1");
  CHECK(bad_set.exit_code == 2);
  CHECK_THAT(bad_set.output, Catch::Contains("--set max_length.epochs=-1: max_length.epochs: "
                                             "must be at least 1, got -1"));
}

TEST_CASE("a wrongly typed or unknown hyperparameter value exits 2 naming it", "[cli]") {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"linear.yaml --set hyperparameters.learning_rate=fast",
       "trial LinearTrial: constructor failed: hyperparameter 'learning_rate' is string \"fast\", "
       "expected float"},
      {"fashion_mnist_test_mode.yaml --test-mode --set hyperparameters.lr_schedule=cosine",
       "hyperparameter 'lr_schedule' is 'cosine'; expected step_decay or warmup_cosine"}};
  for (const auto& [args, message] : cases) {
    TempDir tmp;
    auto r = trainer("fit " + kConfigs + "/" + args + " --output " + (tmp / "run"));
    CHECK(r.exit_code == 2);
    check_one_clean_error(r);
    CHECK_THAT(r.output, Catch::Contains(message));
  }
}

TEST_CASE("plugin errors exit 3", "[cli]") {
  TempDir tmp;
  auto not_found = trainer("check " + kConfigs + "/linear.yaml --set entrypoint=missing_lib:T");
  CHECK(not_found.exit_code == 3);
  check_one_clean_error(not_found);
  CHECK_THAT(not_found.output, Catch::Contains("trial library 'missing_lib' not found"));
  auto no_class = trainer("check " + kConfigs + "/linear.yaml --set entrypoint=linear:Nope");
  CHECK(no_class.exit_code == 3);
  CHECK_THAT(no_class.output, Catch::Contains("it registers: LinearTrial"));
  auto ctor = trainer("fit " + test_config(tmp, "ThrowingCtorTrial"));
  CHECK(ctor.exit_code == 3);
  CHECK_THAT(ctor.output, Catch::Contains("error: trial ThrowingCtorTrial: constructor threw: "
                                          "cannot build the model: out of llamas"));
  auto neither = trainer("check " + test_config(tmp, "NeitherEvalTrial"));
  CHECK(neither.exit_code == 3);
  CHECK_THAT(neither.output, Catch::Contains("overrides neither"));
}

TEST_CASE("a trial failure exits 1 and leaves the last checkpoint", "[cli]") {
  TempDir tmp;
  auto config = test_config(tmp, "RecordingTrial", "min_checkpoint_period: {batches: 3}\n");
  auto r = trainer("fit " + config + " --set hyperparameters.fail_at=7 --output " + (tmp / "run"));
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.output, Catch::Contains("error: train_batch (batch 7) threw: injected failure"));
  CHECK(util::exists(tmp / "run/checkpoints/batch-0000000006/metadata.json"));
  auto resumed = trainer("fit --resume " + (tmp / "run"));
  CHECK_THAT(resumed.output, Catch::Contains("at batch 6"));
  // Before the first checkpoint: the console and the log say the run has none, and how to
  // start it again.
  const std::string early = tmp / "early";
  auto failed = trainer("fit " + config + " --set hyperparameters.fail_at=2 --output " + early);
  CHECK(failed.exit_code == 1);
  const std::string none = early +
                           " holds no checkpoint: the run failed before its first. Rerunning the "
                           "same command starts it from the beginning";
  CHECK_THAT(failed.output, Catch::Contains("warning: " + none));
  const std::string log = read_file(early + "/trainer.log");
  CHECK_THAT(log, Catch::Contains("ERROR train_batch (batch 2) threw: injected failure") &&
                      Catch::Contains("WARN " + none));
  // A config the run finds bad fails a rerun the same way: no rerun is offered.
  const std::string bad = tmp / "bad";
  auto too_long =
      trainer("fit " + config + " --set max_length.epochs=4611686018427387904 --output " + bad);
  INFO(too_long.output);
  CHECK(too_long.exit_code == 2);
  CHECK_THAT(too_long.output, Catch::Contains("more batches than a run can count") &&
                                  Catch::Contains("warning: " + bad +
                                                  " holds no checkpoint: the run failed before "
                                                  "its first. With the config mended (`trainer "
                                                  "fit --resume " +
                                                  bad + " --set KEY=VALUE`)") &&
                                  !Catch::Contains("Rerunning"));
  auto mended = trainer("fit --resume " + bad +
                        " --set max_length.epochs=1 --set searcher.metric=avg_x --quiet");
  INFO(mended.output);
  CHECK(mended.exit_code == 0);
}

TEST_CASE("a record the dataset cannot read fails naming the loader and batch, checkpoint kept",
          "[cli]") {
  TempDir tmp;
  auto config = test_config(tmp, "RecordingTrial",
                            "min_checkpoint_period: {batches: 3}\n"
                            "min_validation_period: {batches: 4}\n"
                            "reproducibility: {experiment_seed: 3}\n");
  // Training: record 2 is in batch 3 of this seed's shuffled first epoch.
  auto training =
      trainer("fit " + config + " --set hyperparameters.bad_record=2 --output " + (tmp / "t"));
  CHECK(training.exit_code == 1);
  check_one_clean_error(training);
  CHECK_THAT(training.output,
             Catch::Contains("error: training data loader (batch 3) threw: bad record 2"));
  CHECK(util::exists(tmp / "t/checkpoints/batch-0000000003/metadata.json"));
  // Validation at batch 4: record 2 is in validation batch 0 (5 records a batch).
  auto validation = trainer("fit " + config + " --set hyperparameters.bad_validation_record=2 " +
                            "--output " + (tmp / "v"));
  CHECK(validation.exit_code == 1);
  check_one_clean_error(validation);
  CHECK_THAT(validation.output,
             Catch::Contains("error: validation data loader (validation batch 0) threw: "
                             "bad record 2"));
  const std::string kept = tmp / "v/checkpoints/batch-0000000003";
  CHECK(util::exists(kept + "/metadata.json"));
  // `trainer predict` reads the same validation data from that checkpoint's trial.
  auto predict = trainer("predict --checkpoint " + kept + " --output " + (tmp / "p.pt"));
  CHECK(predict.exit_code == 1);
  check_one_clean_error(predict);
  CHECK_THAT(predict.output,
             Catch::Contains("error: predict data loader (batch 0) threw: bad record 2"));
}

TEST_CASE("trainer predict refuses a trial without predict_batch before it loads anything",
          "[cli]") {
  TempDir tmp;
  auto fit = trainer("fit " + test_config(tmp, "BatchNormTrial") + " --output " + (tmp / "run"));
  REQUIRE(fit.exit_code == 0);
  auto predict = trainer("predict --checkpoint " + (tmp / "run") + " --output " + (tmp / "p.pt"));
  CHECK(predict.exit_code == 3);
  check_one_clean_error(predict);
  CHECK_THAT(predict.output, Catch::Contains("error: trial BatchNormTrial does not implement "
                                             "predict_batch(batch, batch_idx), which trainer "
                                             "predict runs"));
  CHECK_FALSE(util::exists(tmp / "p.pt"));
}

namespace {

// The metrics rows of `config` in configs/ run in test mode, which must succeed. The run is
// never continued: not by --resume, not by the same command again.
std::vector<nlohmann::json> test_mode_rows(const std::string& config) {
  TempDir tmp;
  const std::string command = "fit " + kConfigs + "/" + config + " --test-mode --output ";
  auto r = trainer(command + (tmp / "run"));
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("test mode: checkpoint round trip OK"));
  auto rows = read_metrics(tmp / "run/metrics.jsonl");
  REQUIRE(rows.size() == 2);
  const std::string metrics = read_file(tmp / "run/metrics.jsonl");
  for (const auto& [again, message] : std::vector<std::pair<std::string, std::string>>{
           {"fit --resume " + (tmp / "run"),
            tmp / "run" + ": a --test-mode run (one training batch, validated on one batch) is "
                          "not continued"},
           {command + (tmp / "run"), "--test-mode checks a trial in a new run, and --output " +
                                         (tmp / "run") + " holds one"},
           {"fit --resume " + (tmp / "run") + " --test-mode",
            "--test-mode checks a trial in a new run; it cannot be combined with --resume"}}) {
    auto refused = trainer(again);
    CHECK(refused.exit_code == 2);
    CHECK_THAT(refused.output, Catch::Contains(message));
  }
  CHECK(read_file(tmp / "run/metrics.jsonl") == metrics);
  return rows;
}

}  // namespace

TEST_CASE("test mode smoke-tests the Fashion-MNIST CNN on the real data", "[cli]") {
  const auto rows = test_mode_rows("fashion_mnist_test_mode.yaml");
  CHECK(rows[1]["metrics"]["validation_accuracy"].get<double>() >= 0.0);
}

TEST_CASE("test mode runs the tuned CNN: bf16, warm-up and cosine, clipping, accumulation",
          "[cli]") {
  const auto rows = test_mode_rows("fashion_mnist_cnn_tuned.yaml");
  // One batch of two in an accumulation window: no optimizer step yet, so no gradient norm.
  CHECK(rows[0]["metrics"].contains("loss"));
  CHECK_FALSE(rows[0]["metrics"].contains("grad_norm"));
}

TEST_CASE("a missing dataset names the path and the Debian package", "[cli]") {
  TempDir tmp;
  auto r = trainer("fit " + kConfigs + "/fashion_mnist_test_mode.yaml --test-mode " +
                   "--set data.path=/nonexistent/fm --output " + (tmp / "run"));
  CHECK(r.exit_code == 1);
  check_one_clean_error(r);
  CHECK_THAT(r.output, Catch::Contains("/nonexistent/fm/train-images-idx3-ubyte.gz not found") &&
                           Catch::Contains("dataset-fashion-mnist"));
  // A misspelt data key is not ignored for its default (TrialContext::check_data_keys).
  auto typo = trainer("fit " + kConfigs + "/fashion_mnist_test_mode.yaml --test-mode " +
                      "--set data.patth=/nonexistent/fm --output " + (tmp / "typo"));
  CHECK(typo.exit_code == 2);
  check_one_clean_error(typo);
  CHECK_THAT(typo.output, Catch::Contains("--set data.patth=/nonexistent/fm: data.patth: not a key "
                                          "this trial reads (did you mean 'path'?); it reads "
                                          "data.path, data.workers"));
}

TEST_CASE("run_on_terminal kills a command that outlives its limit, with its children", "[cli]") {
  const auto start = std::chrono::steady_clock::now();
  const auto r = run_on_terminal("echo started; sleep 60 & sleep 60", std::chrono::seconds(1));
  const auto took = std::chrono::steady_clock::now() - start;
  INFO(r.output);
  CHECK(took < std::chrono::seconds(30));
  CHECK(r.exit_code == 128 + SIGKILL);
  CHECK_THAT(r.output, Catch::StartsWith("started\n") &&
                           Catch::EndsWith("[run_on_terminal: killed after 1 s]\n"));
  // A command within its limit: its output and exit code, nothing added.
  const auto quick = run_on_terminal("echo done; exit 3", std::chrono::seconds(30));
  CHECK(quick.exit_code == 3);
  CHECK(quick.output == "done\n");
}

TEST_CASE("a first SIGINT on a terminal is answered at once, not when the validation ends",
          "[cli]") {
  // The trial interrupts itself, or its parent, in its first validation (batch 4), as Ctrl-C
  // would; a parent passes the signal on. 100000 batches: a signal the parent took late still
  // finds the trial training.
  TempDir tmp;
  const std::string config = test_config(
      tmp, "RecordingTrial", "min_validation_period: {batches: 4}\nsearcher: {metric: avg_x}\n");
  const std::string notice = "interrupted: stopping after the current step";
  SECTION("one process: the notice comes before the validation's line") {
    const std::string command =
        "fit " + config + " --set hyperparameters.sigint_in_validation=0 --output ";
    const auto r = run_on_terminal(kTrainer + " " + command + (tmp / "run"));
    INFO(r.output);
    CHECK(r.exit_code == crucible::kExitStopped);
    CHECK(count_of(r.output, notice) == 1);
    const auto validation = r.output.find("[validation] batch       4");
    CHECK(r.output.find(notice) < validation);
    CHECK(validation != std::string::npos);
    CHECK(util::exists(tmp / "run/checkpoints/batch-0000000004/metadata.json"));
    // Not on a terminal (a job's log): the stop's own line alone.
    const auto logged = trainer(command + (tmp / "logged"));
    CHECK(logged.exit_code == crucible::kExitStopped);
    CHECK_THAT(logged.output, !Catch::Contains(notice) &&
                                  Catch::Contains("received Interrupt: checkpointing at batch"));
  }
  // A parent on the terminal answers once (its ranks or trials write to pipes), and the run
  // stops with a checkpoint.
  const auto answered_once = [&](const std::string& args, const std::string& checkpoints) {
    const auto r = run_on_terminal(kTrainer + " fit " + config +
                                   " --set hyperparameters.sigint_parent_in_validation=0 "
                                   "--set max_length.batches=100000 " +
                                   args);
    INFO(r.output);
    CHECK(r.exit_code == crucible::kExitStopped);
    CHECK(count_of(r.output, notice) == 1);
    CHECK(!util::list_directory(checkpoints).empty());
  };
  SECTION("two ranks: the launcher answers") {
    answered_once("--slots 2 --output " + (tmp / "run"), tmp / "run/checkpoints");
  }
  SECTION("a search: the search answers") {
    answered_once("--set searcher.name=grid --output " + (tmp / "exp"),
                  tmp / "exp/trials/1/checkpoints");
  }
}
