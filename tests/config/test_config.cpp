#include <fstream>
#include <limits>
#include <sstream>

#include "catch.h"

#include <crucible/config.h>
#include <crucible/errors.h>

#include "config/diff.h"
#include "config/suggest.h"
#include "config/yaml_reader.h"
#include "damage.h"
#include "process.h"
#include "util/file_system.h"

namespace fs = crucible::util;
using crucible::ConfigError;
using crucible::parse_experiment_config;
using crucible::testing::TempDir;
using crucible::testing::write_file;

namespace {

const char* kMinimal = R"(name: demo
entrypoint: lib:Trial
hyperparameters:
  global_batch_size: 16
  lr: 0.01
  layers: 3
  activation: relu
  flags: [1, 2]
max_length: {epochs: 2}
)";

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const ConfigError& e) {
    return e.what();
  }
  FAIL("expected a ConfigError");
  return "";
}

// "# key: value" from the header comment of a corpus file.
std::string header(const std::string& text, const std::string& key) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    const std::string prefix = "# " + key + ": ";
    if (line.rfind(prefix, 0) == 0) return line.substr(prefix.size());
  }
  return "";
}

}  // namespace

TEST_CASE("every file of the bad-config corpus fails with its message and location", "[config]") {
  const std::string dir = fs::join(CRUCIBLE_TEST_DATA, "config/bad");
  int files = 0;
  for (const auto& name : fs::list_directory(dir)) {
    const std::string path = fs::join(dir, name);
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    const std::string expect = header(text.str(), "expect");
    const std::string at = header(text.str(), "at");
    INFO("corpus file " << path);
    REQUIRE(!expect.empty());
    const std::string message = error_of([&] { crucible::load_experiment_config(path); });
    CHECK_THAT(message, Catch::Contains(expect));
    if (at != "none") CHECK_THAT(message, Catch::StartsWith(path + ":" + at));
    ++files;
  }
  CHECK(files >= 30);
}

TEST_CASE("a missing experiment file names the path", "[config]") {
  const std::string message =
      error_of([] { crucible::load_experiment_config("/nonexistent/exp.yaml"); });
  CHECK_THAT(message, Catch::Contains("/nonexistent/exp.yaml: cannot open the experiment file"));
}

TEST_CASE("a file's relative host_path is made absolute against the file's directory", "[config]") {
  TempDir tmp;
  const std::string file = tmp / "experiments/exp.yaml";
  fs::create_directories(tmp / "experiments");
  write_file(file, std::string(kMinimal) + "checkpoint_storage: {host_path: ../runs}\n");
  CHECK(crucible::load_experiment_config(file).checkpoint_storage.host_path == tmp / "runs");
  CHECK(crucible::load_experiment_config(file, {"checkpoint_storage.host_path=out"})
            .checkpoint_storage.host_path == tmp / "experiments/out");
  CHECK(crucible::load_experiment_config(file, {"checkpoint_storage.host_path=/abs/x"})
            .checkpoint_storage.host_path == "/abs/x");
}

TEST_CASE("defaults fill what the file omits", "[config]") {
  auto c = parse_experiment_config(kMinimal, "mem.yaml");
  CHECK(c.name == "demo");
  CHECK(c.global_batch_size() == 16);
  CHECK(c.max_length == crucible::Length{crucible::LengthUnit::kEpochs, 2});
  CHECK(c.min_validation_period.value == 0);
  CHECK(c.searcher.name == crucible::SearcherName::kSingle);
  CHECK(c.checkpoint_storage.host_path == "runs");
  CHECK(c.resources.slots_per_trial == 1);
  CHECK(c.optimizations.aggregation_frequency == 1);
  CHECK(c.optimizations.gradient_bucket_mb == 25);
  CHECK(c.optimizations.gradient_as_bucket_view);
  CHECK(c.resources.distributed_timeout_seconds == 300);
  CHECK(c.resources.distributed_backend == crucible::DistributedBackend::kAuto);
  CHECK(c.scheduling_unit == 100);
  auto hp = c.constant_hyperparameters();
  CHECK(hp["lr"].is_number_float());
  CHECK(hp["layers"].is_number_integer());
  CHECK(hp["activation"] == "relu");
  CHECK(hp["flags"] == nlohmann::json::array({1, 2}));
}

TEST_CASE("a key that is a list or a mapping is refused at its place", "[config]") {
  CHECK(error_of([] {
          parse_experiment_config(std::string(kMinimal) + "data: {[1]: 2}\n", "k.yaml");
        }) == "k.yaml:10:8: data: a key must be a name or a number, not a list or a mapping");
  CHECK(
      error_of([] { parse_experiment_config(std::string(kMinimal) + "[a, b]: 1\n", "k.yaml"); }) ==
      "k.yaml:10:1: (top level): a key must be a name or a number, not a list or a mapping");
}

TEST_CASE("YAML core-schema typing of scalars", "[config]") {
  auto c = parse_experiment_config(R"(name: t
entrypoint: l:T
hyperparameters: {global_batch_size: 4, a: "12", b: 1e-3, c: true, d: 0x10, e: null, f: 3.0,
                  g: !!str 10}
max_length: {batches: 1}
)",
                                   "t.yaml");
  auto hp = c.constant_hyperparameters();
  CHECK(hp["a"] == "12");
  CHECK(hp["g"] == "10");
  CHECK(hp["b"].get<double>() == Approx(0.001));
  CHECK(hp["c"] == true);
  CHECK(hp["d"] == 16);
  CHECK(hp["e"].is_null());
  CHECK(hp["f"].is_number_float());
}

TEST_CASE("set overrides change any key, typed by YAML", "[config]") {
  auto c = parse_experiment_config(
      kMinimal, "mem.yaml",
      {"hyperparameters.lr=0.5", "hyperparameters.layers=7", "max_length.epochs=9",
       "checkpoint_storage.host_path=/tmp/x", "hyperparameters.new_flag=true",
       "min_validation_period={batches: 3}", "data.path=/d"});
  auto hp = c.constant_hyperparameters();
  CHECK(hp["lr"].get<double>() == 0.5);
  CHECK(hp["layers"] == 7);
  CHECK(hp["new_flag"] == true);
  CHECK(c.max_length == crucible::Length{crucible::LengthUnit::kEpochs, 9});
  auto unit = parse_experiment_config(kMinimal, "mem.yaml", {"max_length.batches=30"});
  CHECK(unit.max_length == crucible::Length{crucible::LengthUnit::kBatches, 30});
  CHECK(c.checkpoint_storage.host_path == "/tmp/x");
  CHECK(c.min_validation_period == crucible::Length{crucible::LengthUnit::kBatches, 3});
  CHECK(c.data["path"] == "/d");
}

TEST_CASE("a bad --set names the override, not the file", "[config]") {
  CHECK_THAT(error_of([] { parse_experiment_config(kMinimal, "m.yaml", {"max_lenght.epochs=3"}); }),
             Catch::StartsWith("--set max_lenght.epochs=3: max_lenght: unknown key 'max_lenght' "
                               "(did you mean 'max_length'?)"));
  CHECK_THAT(
      error_of([] { parse_experiment_config(kMinimal, "m.yaml", {"max_length.epochs=x"}); }),
      Catch::StartsWith("--set max_length.epochs=x: max_length.epochs: expected an integer"));
  CHECK_THAT(error_of([] { parse_experiment_config(kMinimal, "m.yaml", {"no_equals_sign"}); }),
             Catch::Contains("expected KEY=VALUE"));
  CHECK_THAT(error_of([] { parse_experiment_config(kMinimal, "m.yaml", {"name.x=1"}); }),
             Catch::Contains("'name' is not a mapping"));
  // An override under the key in error: the file's place, and the override that changed it.
  CHECK_THAT(
      error_of([] { parse_experiment_config(kMinimal, "m.yaml", {"max_length.batches.x=1"}); }),
      Catch::StartsWith("m.yaml:9:13, with --set max_length.batches.x=1: max_length: expected "
                        "exactly one of batches, epochs or records"));
}

TEST_CASE(
    "an override changes the key it names: not an alias's other keys, and one unit of a length",
    "[config]") {
  using crucible::Length;
  using crucible::LengthUnit;
  const auto c = parse_experiment_config(
      R"(name: a
entrypoint: l:T
hyperparameters: {global_batch_size: 8, lr: &lr 0.1, warmup_lr: *lr}
max_length: {batches: 100}
min_validation_period: &p {epochs: 1}
min_checkpoint_period: *p
)",
      "a.yaml", {"hyperparameters.lr=0.2", "min_validation_period.batches=7"});
  CHECK(c.hyperparameters.at("lr").value == 0.2);
  CHECK(c.hyperparameters.at("warmup_lr").value == 0.1);
  CHECK(c.min_validation_period == Length{LengthUnit::kBatches, 7});
  CHECK(c.min_checkpoint_period == Length{LengthUnit::kEpochs, 1});
  // Determined's searcher.max_length: a unit set replaces the other there too, and max_length
  // follows it; a max_length that the search's own length would override is refused.
  const std::string older = R"(name: d
entrypoint: l:T
hyperparameters: {global_batch_size: 8}
searcher: {metric: loss, max_length: {batches: 937}}
)";
  const auto d = parse_experiment_config(older, "d.yaml", {"searcher.max_length.epochs=1"});
  CHECK(d.searcher.max_length == Length{LengthUnit::kEpochs, 1});
  CHECK(d.max_length == Length{LengthUnit::kEpochs, 1});
  CHECK_THAT(
      error_of([&] { parse_experiment_config(older, "d.yaml", {"max_length.batches=100"}); }),
      Catch::StartsWith("--set max_length.batches=100: max_length: 100 batches disagrees with "
                        "searcher.max_length (937 batches)"));
  // An empty value (an unset shell variable) is refused, on any key, rather than read as null,
  // which an optional key would take as its default. An explicit null is YAML's "unset".
  CHECK_THAT(error_of([] { parse_experiment_config(kMinimal, "m.yaml", {"max_length.epochs="}); }),
             Catch::StartsWith("--set max_length.epochs=: no value after '='"));
  CHECK_THAT(error_of([] { parse_experiment_config(kMinimal, "m.yaml", {"scheduling_unit= "}); }),
             Catch::StartsWith("--set scheduling_unit= : no value after '='"));
  CHECK(parse_experiment_config(kMinimal, "m.yaml", {"scheduling_unit=null"}).scheduling_unit ==
        crucible::ExperimentConfig().scheduling_unit);
  CHECK_THAT(
      error_of([] { parse_experiment_config(kMinimal, "m.yaml", {"max_length.epochs=null"}); }),
      Catch::StartsWith("--set max_length.epochs=null: max_length.epochs: expected an integer, "
                        "got nothing (null)"));
}

TEST_CASE("search spaces parse, and a single trial refuses them by name", "[config]") {
  auto c = parse_experiment_config(R"(name: s
entrypoint: l:T
hyperparameters:
  global_batch_size: 8
  lr: {type: log, minval: -4, maxval: -1, base: 10}
  units: {type: int, minval: 4, maxval: 64, count: 4}
  dropout: {type: double, minval: 0.0, maxval: 0.5}
  act: {type: categorical, vals: [relu, tanh]}
  fixed: {type: const, val: 3}
max_length: {batches: 10}
)",
                                   "s.yaml");
  using Type = crucible::HyperparameterSpec::Type;
  CHECK(c.hyperparameters["lr"].type == Type::kLog);
  CHECK(c.hyperparameters["units"].type == Type::kInt);
  CHECK(c.hyperparameters["units"].count == 4);
  CHECK(c.hyperparameters["dropout"].maxval == 0.5);
  CHECK(c.hyperparameters["act"].vals.size() == 2);
  CHECK(c.hyperparameters["fixed"].value == 3);
  CHECK_THAT(error_of([&] { c.constant_hyperparameters(); }),
             Catch::Contains("hyperparameters.act: is a search space"));
}

TEST_CASE(
    "a spec inside a nested mapping is refused by its path: wrapped in const it is a constant",
    "[config]") {
  const auto parse = [](const std::string& hyperparameters) {
    return parse_experiment_config(
        "name: s\nentrypoint: l:T\nhyperparameters: {global_batch_size: "
        "8, " +
            hyperparameters + "}\nmax_length: {batches: 10}\n",
        "s.yaml");
  };
  // Determined would search these; Crucible would hand the trial the spec as a constant.
  CHECK_THAT(error_of([&] { parse("opt: {lr: {type: log, minval: -4, maxval: -1}}"); }),
             Catch::Contains("hyperparameters.opt.lr: a hyperparameter spec inside a nested "
                             "mapping"));
  CHECK_THAT(error_of([&] { parse("opt: {sgd: {lr: {type: const, val: 0.1}}}"); }),
             Catch::Contains("hyperparameters.opt.sgd.lr: a hyperparameter spec"));
  // Plain nested mappings, a "type" that names no kind of hyperparameter, and lists (constants in
  // Determined too) are constants.
  const auto plain = parse(
      "opt: {name: sgd, lr: 0.1}, model: {arch: {type: resnet}}, "
      "columns: [{name: age, type: int}, {opt: {lr: {type: log}}}]");
  CHECK(plain.constant_hyperparameters()["model"]["arch"]["type"] == "resnet");
  CHECK(plain.constant_hyperparameters()["opt"]["lr"] == 0.1);
  CHECK(plain.constant_hyperparameters()["columns"][0]["type"] == "int");
  // {type: const, val: ...} passes such a mapping literally. Written back (in that form where
  // the value holds a spec-like mapping at any depth) each reads as the same constant.
  const auto wrapped = parse(
      "opt: {type: const, val: {lr: {type: log, minval: -4, maxval: -1}}}, "
      "arch: {type: const, val: {type: resnet}}");
  CHECK(wrapped.constant_hyperparameters()["opt"]["lr"]["type"] == "log");
  for (const auto& c : {plain, wrapped}) {
    const auto again = parse_experiment_config(crucible::to_yaml(c), "again.yaml");
    CHECK((again.hyperparameters == c.hyperparameters));
  }
}

TEST_CASE("to_yaml round-trips every field", "[config]") {
  auto c = parse_experiment_config(R"(name: "123"
description: a test
entrypoint: ./lib.so:T
hyperparameters:
  global_batch_size: 8
  lr: 1.0
  s: "true"
  nested: {a: [1, 2.5, x]}
  space: {type: log, minval: -3, maxval: 0, base: 2}
searcher: {name: single, metric: acc, smaller_is_better: false}
max_length: {records: 1000}
records_per_epoch: 500
min_validation_period: {batches: 7}
min_checkpoint_period: {epochs: 1}
perform_initial_validation: true
checkpoint_policy: all
checkpoint_storage: {host_path: /tmp/r, save_trial_best: 2, save_trial_latest: 3}
optimizations: {aggregation_frequency: 2, average_aggregated_gradients: false}
reproducibility: {experiment_seed: 99}
scheduling_unit: 5
data: {path: /d, n: 3}
)",
                                   "rt.yaml");
  const std::string once = crucible::to_yaml(c);
  auto again = parse_experiment_config(once, "again.yaml");
  CHECK(crucible::to_yaml(again) == once);
  CHECK(again.name == "123");
  CHECK(again.hyperparameters["lr"].value.is_number_float());
  CHECK(again.hyperparameters["s"].value == "true");
  CHECK(again.searcher.smaller_is_better == false);
  CHECK(again.max_length == crucible::Length{crucible::LengthUnit::kRecords, 1000});
  CHECK(again.checkpoint_policy == crucible::CheckpointPolicy::kAll);
  CHECK(again.optimizations.average_aggregated_gradients == false);
  CHECK(again.reproducibility.experiment_seed == 99);
  CHECK(again.data["n"] == 3);
}

namespace {

// A config whose every member differs from its default. The structured bindings make this fail
// to compile when a member is added, until the member is filled here too.
crucible::ExperimentConfig every_member_set() {
  using crucible::HyperparameterSpec;
  crucible::ExperimentConfig c;
  auto& [name, description, entrypoint, hyperparameters, searcher, max_length, records_per_epoch,
         min_validation_period, min_checkpoint_period, perform_initial_validation,
         checkpoint_policy, checkpoint_storage, resources, optimizations, reproducibility,
         early_stopping, profiling, scheduling_unit, max_restarts, data, source_path, overrides,
         warnings] = c;
  name = "123";
  description = "a test";
  entrypoint = "./lib.so:T";
  hyperparameters["global_batch_size"].value = 12;
  hyperparameters["s"].value = "true";
  hyperparameters["lr"].value = 0.1;
  hyperparameters["nested"].value = nlohmann::json::parse(R"({"a": [1, 2.5, "x"], "b": null})");
  HyperparameterSpec& space = hyperparameters["space"];
  space.type = HyperparameterSpec::Type::kLog;
  space.minval = -3.5;
  space.maxval = 0.25;
  space.base = 2;
  space.count = 4;
  hyperparameters["units"].type = HyperparameterSpec::Type::kInt;
  hyperparameters["units"].minval = 4;
  hyperparameters["units"].maxval = 64;
  hyperparameters["act"].type = HyperparameterSpec::Type::kCategorical;
  hyperparameters["act"].vals = {"relu", 1, false};
  auto& [searcher_name, metric, smaller_is_better, max_trials, max_concurrent_trials, mode, divisor,
         max_rungs, bracket_rungs, max_time, time_metric, searcher_length, source_trial_id,
         source_checkpoint_uuid] = searcher;
  searcher_name = crucible::SearcherName::kAdaptiveAsha;
  metric = "accuracy";
  smaller_is_better = false;
  max_trials = 9;
  max_concurrent_trials = 0;
  mode = crucible::AshaMode::kConservative;
  divisor = 3;
  max_rungs = 2;
  bracket_rungs = {3, 1};
  max_time = 1000;
  time_metric = "records";  // max_time, searcher.max_length and max_length agree
  searcher_length = {crucible::LengthUnit::kRecords, 1000};
  source_trial_id = "/tmp/source run";
  source_checkpoint_uuid = "";  // one of the two
  max_length = {crucible::LengthUnit::kRecords, 1000};
  records_per_epoch = 500;
  min_validation_period = {crucible::LengthUnit::kBatches, 7};
  min_checkpoint_period = {crucible::LengthUnit::kEpochs, 1};
  perform_initial_validation = true;
  checkpoint_policy = crucible::CheckpointPolicy::kNone;
  auto& [host_path, save_trial_best, save_trial_latest, save_experiment_best] = checkpoint_storage;
  host_path = "/tmp/r";
  save_trial_best = 2;
  save_trial_latest = 3;
  save_experiment_best = 4;
  auto& [slots_per_trial, distributed_timeout_seconds, distributed_backend] = resources;
  slots_per_trial = 3;
  distributed_timeout_seconds = 1.5;
  distributed_backend = crucible::DistributedBackend::kNccl;
  auto& [aggregation_frequency, average_aggregated_gradients, gradient_bucket_mb,
         gradient_as_bucket_view, mixed_precision, gradient_clipping, non_finite,
         max_consecutive_skips] = optimizations;
  aggregation_frequency = 2;
  average_aggregated_gradients = false;
  gradient_bucket_mb = 1.0 / 3;
  gradient_as_bucket_view = false;
  mixed_precision = crucible::MixedPrecision::kBf16;
  auto& [max_norm, norm_type, max_value] = gradient_clipping;
  max_norm = 0.75;
  norm_type = std::numeric_limits<double>::infinity();
  max_value = 0;  // one of the two: max_value round-trips in its own test
  non_finite = crucible::NonFinitePolicy::kSkip;
  max_consecutive_skips = 3;
  auto& [experiment_seed] = reproducibility;
  experiment_seed = 9223372036854775807ULL;  // the largest a file can hold
  auto& [stop_metric, stop_smaller, patience, min_delta] = early_stopping;
  stop_metric = "validation_accuracy";
  stop_smaller = true;  // unlike the searcher's
  patience = 4;
  min_delta = 0.001;
  auto& [profiling_enabled, begin_on_batch, end_after_batch, sync_timings, trace] = profiling;
  profiling_enabled = true;
  begin_on_batch = 3;
  end_after_batch = 8;
  sync_timings = false;
  trace = true;
  scheduling_unit = 5;
  max_restarts = 0;
  data = {{"path", "/d"}, {"n", 3}};
  source_path = "built in code";
  overrides = {"name=123"};
  warnings = {"not part of the config"};
  return c;
}

}  // namespace

TEST_CASE("a config read back from to_yaml equals the one written, member by member", "[config]") {
  const crucible::ExperimentConfig c = every_member_set();
  const crucible::ExperimentConfig defaults;
  CHECK_FALSE((c.searcher == defaults.searcher));
  CHECK_FALSE((c.checkpoint_storage == defaults.checkpoint_storage));
  CHECK_FALSE((c.resources == defaults.resources));
  CHECK_FALSE((c.optimizations == defaults.optimizations));
  CHECK_FALSE((c.reproducibility == defaults.reproducibility));

  const std::string yaml = crucible::to_yaml(c);
  INFO(yaml);
  const crucible::ExperimentConfig again = parse_experiment_config(yaml, "again.yaml");
  CHECK(again.source_path == "again.yaml");
  CHECK((again == c));
  // Member by member, so that a failure names the part that did not survive.
  CHECK((again.hyperparameters == c.hyperparameters));
  CHECK((again.searcher == c.searcher));
  CHECK((again.checkpoint_storage == c.checkpoint_storage));
  CHECK((again.resources == c.resources));
  CHECK((again.optimizations == c.optimizations));
  CHECK((again.reproducibility == c.reproducibility));
  CHECK((again.early_stopping == c.early_stopping));
  CHECK((again.profiling == c.profiling));
  CHECK((again.data == c.data));

  // Every member is compared: changing any one makes the configs differ.
  crucible::ExperimentConfig changed = again;
  changed.optimizations.gradient_as_bucket_view = true;
  CHECK_FALSE((changed == c));
  changed = again;
  changed.hyperparameters["space"].count = 5;
  CHECK_FALSE((changed == c));
  changed = again;
  changed.source_path = "elsewhere.yaml";
  changed.overrides = {"name=123", "max_restarts=0"};
  CHECK((changed == c));
}

TEST_CASE("gradient clipping by value and early stopping's defaults", "[config]") {
  const auto c = parse_experiment_config(std::string(kMinimal) + R"(optimizations:
  gradient_clipping: {max_value: 0.5}
searcher: {metric: validation_accuracy, smaller_is_better: false}
early_stopping: {metric: accuracy}
)",
                                         "mem.yaml");
  CHECK(c.optimizations.gradient_clipping.max_value == 0.5);
  CHECK(c.optimizations.gradient_clipping.max_norm == 0);
  CHECK(c.early_stopping.metric == "accuracy");
  CHECK_FALSE(c.early_stopping.smaller_is_better);  // the searcher's
  CHECK(c.early_stopping.patience == 0);
  CHECK((parse_experiment_config(crucible::to_yaml(c), "again.yaml") == c));
  const auto defaults = parse_experiment_config(kMinimal, "mem.yaml");
  CHECK(defaults.optimizations.mixed_precision == crucible::MixedPrecision::kNone);
  CHECK(defaults.optimizations.non_finite == crucible::NonFinitePolicy::kStop);
  CHECK_FALSE(defaults.optimizations.gradient_clipping.enabled());
  CHECK(defaults.early_stopping.metric.empty());
}

TEST_CASE("profiling selects the batches of its window, both ends included", "[config]") {
  const auto off = parse_experiment_config(kMinimal, "mem.yaml");
  CHECK_FALSE(off.profiling.enabled);
  CHECK_FALSE(off.profiling.profiles(0));
  const auto c = parse_experiment_config(
      std::string(kMinimal) + "profiling: {enabled: true, begin_on_batch: 5, end_after_batch: 9}\n",
      "mem.yaml");
  CHECK(c.profiling.sync_timings);
  CHECK_FALSE(c.profiling.trace);
  std::vector<int64_t> profiled;
  for (int64_t b = 0; b < 20; ++b) {
    if (c.profiling.profiles(b)) profiled.push_back(b);
  }
  CHECK(profiled == std::vector<int64_t>{5, 6, 7, 8, 9});
  // An open window written out reads back open.
  const auto open = parse_experiment_config(
      std::string(kMinimal) + "profiling: {enabled: true, begin_on_batch: 5}\n", "mem.yaml");
  CHECK(open.profiling.end_after_batch == -1);
  CHECK((parse_experiment_config(crucible::to_yaml(open), "again.yaml") == open));
  CHECK(parse_experiment_config(kMinimal, "x.yaml", {"profiling.end_after_batch=7"})
            .profiling.end_after_batch == 7);
}

TEST_CASE("the defaults written out read back as the defaults", "[config]") {
  const auto c = parse_experiment_config(kMinimal, "mem.yaml");
  CHECK((parse_experiment_config(crucible::to_yaml(c), "again.yaml") == c));
  // Larger is better, no early stopping: its {} reads back with the searcher's direction too.
  const auto larger =
      parse_experiment_config(kMinimal, "mem.yaml", {"searcher.smaller_is_better=false"});
  CHECK((parse_experiment_config(crucible::to_yaml(larger), "again.yaml") == larger));
}

TEST_CASE("free-form mappings refuse repeated keys and merge keys, naming the place", "[config]") {
  const std::string base = std::string(kMinimal);
  CHECK_THAT(error_of([&] {
               parse_experiment_config(base + "data: {path: /a, size: 3, path: /b}\n", "d.yaml");
             }),
             Catch::Contains("d.yaml:") && Catch::Contains("data.path: duplicate key 'path'"));
  CHECK_THAT(error_of([&] {
               parse_experiment_config(base + "data: {<<: {path: /a}, size: 3}\n", "d.yaml");
             }),
             Catch::Contains("data.<<: a YAML merge key (<<), which is not supported"));
  // Quoted, "<<" is a key like any other.
  CHECK(parse_experiment_config(base + "data: {\"<<\": 1}\n", "d.yaml").data["<<"] == 1);
  CHECK_THAT(error_of([&] {
               parse_experiment_config(
                   "name: h\nentrypoint: l:T\nmax_length: {batches: 1}\n"
                   "hyperparameters: {global_batch_size: 8, opt: {a: 1, a: 2}}\n",
                   "d.yaml");
             }),
             Catch::Contains("hyperparameters.opt.a: duplicate key 'a'"));
}

TEST_CASE("hyperparameter mistakes are named as what they are", "[config]") {
  // The error of a file with these hyperparameters.
  const auto refusal = [](const std::string& hyperparameters) {
    return error_of([&] {
      parse_experiment_config(
          "name: h\nentrypoint: l:T\nmax_length: {batches: 1}\n"
          "hyperparameters: " +
              hyperparameters + "\n",
          "h.yaml");
    });
  };
  CHECK_THAT(refusal("{global_batch_size: 8, opt: {type: adam, lr: 0.1}}"),
             Catch::Contains("hyperparameters.opt.type: 'adam' is not a hyperparameter type") &&
                 Catch::Contains("{type: const, val: {type: adam, ...}}"));
  CHECK_THAT(refusal("{global_batch_size: {type: categorical, vals: [32, 64]}}"),
             Catch::Contains("hyperparameters.global_batch_size: is a search space"));
  CHECK_THAT(refusal("{global_batch_size: 8, n: {type: int, minval: 0, maxval: "
                     "9223372036854775807}}"),
             Catch::Contains("hyperparameters.n.maxval: 9223372036854775808 is beyond 2^53"));
  // Bounds whose values overflow: a trial would have trained with an infinite rate.
  CHECK_THAT(refusal("{global_batch_size: 8, lr: {type: log, minval: 300, maxval: 400, count: 2}}"),
             Catch::Contains("hyperparameters.lr.maxval: 10^400 is beyond a double's range"));
  CHECK_THAT(refusal("{global_batch_size: 8, w: {type: double, minval: -1e308, maxval: 1e308}}"),
             Catch::Contains("hyperparameters.w.maxval: the range from minval -1e+308 to maxval "
                             "1e+308 is beyond a double's"));
  // A key the type does not take is named with the keys it does take.
  CHECK_THAT(
      refusal("{global_batch_size: 8, lr: {type: double, min: 0, maxval: 1}}"),
      Catch::Contains("valid keys here: minval, maxval, count, type") && !Catch::Contains("vals"));
}

TEST_CASE("the keys safe on resume are those the schema marks", "[config]") {
  std::vector<std::string> safe;
  for (const auto& key : crucible::config_keys()) {
    if (key.safe_on_resume) safe.push_back(key.path);
  }
  CHECK(safe ==
        std::vector<std::string>{
            "description", "max_length", "min_validation_period", "min_checkpoint_period",
            "checkpoint_storage.save_trial_best", "checkpoint_storage.save_trial_latest",
            "checkpoint_storage.save_experiment_best", "resources.distributed_timeout_seconds",
            "optimizations.gradient_as_bucket_view", "profiling.enabled",
            "profiling.begin_on_batch", "profiling.end_after_batch", "profiling.sync_timings",
            "profiling.trace", "scheduling_unit", "max_restarts"});
  using crucible::config::is_safe_change;
  CHECK(is_safe_change("max_length.epochs"));
  CHECK(is_safe_change("checkpoint_storage.save_trial_best"));
  CHECK_FALSE(is_safe_change("checkpoint_storage.host_path"));
  CHECK_FALSE(is_safe_change("hyperparameters.lr"));
  CHECK_FALSE(is_safe_change("max_lengthx"));
  CHECK_FALSE(is_safe_change("data.path"));
  // A search's resume: the same keys but max_length, which sets its trials' and rungs' lengths.
  std::vector<std::string> search_safe;
  for (const auto& key : crucible::config_keys()) {
    if (key.safe_on_search_resume) search_safe.push_back(key.path);
  }
  safe.erase(safe.begin() + 1);
  CHECK(search_safe == safe);
  CHECK_FALSE(crucible::config::is_safe_search_change("max_length.batches"));
  CHECK(crucible::config::is_safe_search_change("min_validation_period.epochs"));
}

TEST_CASE("overrides_for gives --set texts that make a config's picked keys another's",
          "[config]") {
  namespace config = crucible::config;
  const auto before = parse_experiment_config(
      std::string(kMinimal) +
          "min_validation_period: {batches: 5}\nprofiling: {enabled: true, end_after_batch: 9}\n"
          "description: old\n",
      "a.yaml");
  const auto after =
      parse_experiment_config(std::string(kMinimal) +
                                  "min_validation_period: {epochs: 1}\nprofiling: {enabled: true}\n"
                                  "description: 'a: b # c'\nscheduling_unit: 7\n",
                              "b.yaml", {"max_length.batches=3", "hyperparameters.lr=0.5"});
  const auto changes = config::diff(before, after);
  const auto sets = config::overrides_for(changes, after, config::is_safe_search_change);
  // One per key (a period whole, its unit changed), null for a key left unset; max_length and
  // hyperparameters are not picked.
  CHECK(sets == std::vector<std::string>{"description=\"a: b # c\"",
                                         "min_validation_period={epochs: 1}",
                                         "profiling.end_after_batch=null", "scheduling_unit=7"});
  // Applied to the first config, they give the second's values in those keys.
  const auto applied = parse_experiment_config(
      std::string(kMinimal) +
          "min_validation_period: {batches: 5}\nprofiling: {enabled: true, end_after_batch: 9}\n"
          "description: old\n",
      "a.yaml", sets);
  for (const auto& c : config::diff(applied, after)) {
    INFO(c.key);
    CHECK_FALSE(config::is_safe_search_change(c.key));
  }
  CHECK_THAT(config::change_list(changes, config::is_safe_search_change),
             Catch::Contains("\n  scheduling_unit: 100 -> 7") &&
                 Catch::Contains("\n  max_length.batches: (absent) -> 3  (unsafe)"));
}

// configs/determined/ holds Determined's files, some of them incomplete on purpose:
// tests/search/test_determined.cpp checks those.
TEST_CASE("every shipped config in configs/ is valid", "[config]") {
  int n = 0;
  const std::string configs = fs::join(CRUCIBLE_SOURCE_DIR, "configs");
  for (const auto& name : fs::list_directory(configs)) {
    if (name.size() < 5 || name.compare(name.size() - 5, 5, ".yaml") != 0) continue;
    INFO(name);
    CHECK_NOTHROW(crucible::load_experiment_config(fs::join(configs, name)));
    ++n;
  }
  CHECK(n >= 4);
}

TEST_CASE("bytes that are not UTF-8 are refused at their line and column", "[config]") {
  std::string text = kMinimal;
  text.insert(text.find("0.01"), "\xFF");  // line 5, "  lr: 0.01"
  CHECK(error_of([&] { parse_experiment_config(text, "x.yaml"); }) ==
        "x.yaml:5:7: not UTF-8 text (byte 0xFF); save the file as UTF-8");
  CHECK_THAT(error_of([&] { parse_experiment_config(kMinimal, "x.yaml", {"name=caf\xC3"}); }),
             Catch::StartsWith("--set name=caf...: not UTF-8 text (byte 0xC3 at offset 8)"));
  // A NUL is UTF-8, but no character YAML text holds: yaml-cpp misread what followed it.
  std::string nul = kMinimal;
  nul.insert(nul.find("relu") + 2, std::string(1, '\0'));  // line 7, "  activation: relu"
  CHECK(error_of([&] { parse_experiment_config(nul, "x.yaml"); }) ==
        "x.yaml:7:17: a NUL byte (0x00), which YAML text cannot hold; remove it");
  // Well-formed UTF-8 is a name like any other.
  CHECK(parse_experiment_config(kMinimal, "x.yaml", {"name=caf\xC3\xA9"}).name == "caf\xC3\xA9");
}

TEST_CASE("a quote never closed is refused at the quote, and quotes that close are read",
          "[config]") {
  // yaml-cpp reads an open quote to the end of the text: the keys after it were lost.
  const std::string open = std::string(kMinimal) + "description: 'a run\nscheduling_unit: 5\n";
  CHECK_THAT(error_of([&] { parse_experiment_config(open, "q.yaml"); }),
             Catch::StartsWith("q.yaml:10:14: invalid YAML: this quote is never closed"));
  // A second document in a value was dropped; the file refuses one.
  CHECK_THAT(error_of([] { parse_experiment_config(kMinimal, "q.yaml", {"name=a\n---\nb"}); }),
             Catch::StartsWith("--set name=a\n---\nb: the value is not valid YAML: it holds a "
                               "second document (after ---)"));
  // A value ending in a newline, as from $(cat file); without one yaml-cpp says "illegal EOF".
  CHECK_THAT(
      error_of([] { parse_experiment_config(kMinimal, "q.yaml", {"description=\"a\n"}); }),
      Catch::StartsWith("--set description=\"a\n: the value is not valid YAML: a quote in it is "
                        "never closed"));
  // Escaped and doubled quotes, quotes in plain and block scalars and in comments, a quoted key,
  // a byte-order mark and characters of several bytes before the quotes.
  const std::string closed = "\xEF\xBB\xBF" + std::string(kMinimal) +
                             R"(description: "caf)"
                             "\xC3\xA9"
                             R"( \"x\" \\"  # it's "
data:
  "k)"
                             "\xC3\xA9"
                             R"(y": 'it''s'
  plain: it's "so"
  block: |
    an "open quote
  last: ''
)";
  const auto c = parse_experiment_config(closed, "q.yaml");
  CHECK(c.description == "caf\xC3\xA9 \"x\" \\");
  CHECK(c.data["k\xC3\xA9y"] == "it's");
  CHECK(c.data["plain"] == "it's \"so\"");
  CHECK(c.data["block"] == "an \"open quote\n");
  CHECK(c.data["last"] == "");
  CHECK(parse_experiment_config(kMinimal, "q.yaml", {"description='a ''b'''"}).description ==
        "a 'b'");
}

TEST_CASE("damaged copies of the shipped configs are a ConfigError naming the file", "[config]") {
  const std::string configs = fs::join(CRUCIBLE_SOURCE_DIR, "configs");
  for (const auto& name : fs::list_directory(configs)) {
    if (name.size() < 5 || name.compare(name.size() - 5, 5, ".yaml") != 0) continue;
    const std::string source = "damaged/" + name;
    const int refused = crucible::testing::damaged_copies_refused<ConfigError>(
        crucible::testing::read_file(fs::join(configs, name)), source, 400,
        [&](const std::string& text) { parse_experiment_config(text, source); });
    INFO(name);
    // A truncation that drops a required key, and most damage to a key's name, are refused.
    CHECK(refused >= 100);
  }
}

TEST_CASE("did-you-mean suggests only near keys", "[config]") {
  using crucible::config::nearest;
  CHECK(nearest("max_lenght", {"max_length", "name"}) == "max_length");
  CHECK(nearest("hyperparameter", {"hyperparameters", "name"}) == "hyperparameters");
  CHECK(nearest("zzzzzz", {"max_length", "name"}).empty());
}

TEST_CASE("a key an error names after parsing is placed at its line and column", "[config]") {
  using crucible::config::key_place;
  TempDir tmp;
  const std::string file = tmp / "e.yaml";
  write_file(file, "name: e\noptimizations:\n  mixed_precision: fp16\nsearcher: [1]\n");
  crucible::ExperimentConfig config;
  config.source_path = file;
  CHECK(key_place(config, "optimizations.mixed_precision", "fp16") == file + ":3:20");
  CHECK(key_place(config, "name", "e") == file + ":1:7");
  CHECK(key_place(config, "optimizations") == file + ":3:3");
  // Another value there, no such key, a path through a list, or no file: the file alone.
  CHECK(key_place(config, "optimizations.mixed_precision", "bf16") == file);
  CHECK(key_place(config, "early_stopping.metric", "loss") == file);
  CHECK(key_place(config, "early_stopping.metric") == file);
  CHECK(key_place(config, "searcher.metric", "loss") == file);
  crucible::ExperimentConfig missing;
  missing.source_path = tmp / "missing.yaml";
  CHECK(key_place(missing, "name", "e") == tmp / "missing.yaml");
  // A key that --set gave (itself, a key above it, or one under it): the last such override.
  config.overrides = {"name=x", "searcher.metric=loss", "optimizations={}", "name=y"};
  CHECK(key_place(config, "name", "e") == "--set name=y");
  CHECK(key_place(config, "searcher.metric", "loss") == "--set searcher.metric=loss");
  CHECK(key_place(config, "optimizations.mixed_precision", "fp16") == "--set optimizations={}");
  CHECK(key_place(config, "name_x") == file);
  // An override under the key: the file's place with it, or it alone for a key it created; the
  // last applied one that reached the key, above or under it.
  CHECK(key_place(config, "searcher") == file + ":4:11, with --set searcher.metric=loss");
  config.overrides = {"data.x=1", "data={}", "data.y.z=2"};
  CHECK(key_place(config, "data") == "--set data.y.z=2");
  CHECK(key_place(config, "data.x") == "--set data={}");
  // The file is only read.
  CHECK(crucible::testing::read_file(file) ==
        "name: e\noptimizations:\n  mixed_precision: fp16\nsearcher: [1]\n");
}

TEST_CASE("early stopping without a validation period is a warning naming its place", "[config]") {
  const std::string base = R"(name: e
entrypoint: lib:Trial
hyperparameters: {global_batch_size: 8}
searcher: {name: single, metric: validation_loss}
max_length: {batches: 100}
early_stopping: {metric: loss, patience: 2}
)";
  const auto c = crucible::parse_experiment_config(base, "e.yaml");
  REQUIRE(c.warnings.size() == 1);
  CHECK(c.warnings[0] ==
        "e.yaml:6:17: early_stopping has nothing to act on: with no min_validation_period the "
        "trial validates only at the end of training; set min_validation_period");
  CHECK(crucible::parse_experiment_config(base + "min_validation_period: {batches: 10}\n", "e.yaml")
            .warnings.empty());
  // Adaptive ASHA validates at every rung.
  CHECK(crucible::parse_experiment_config(base, "e.yaml",
                                          {"searcher.name=adaptive_asha", "searcher.max_trials=2"})
            .warnings.empty());
}

TEST_CASE("Determined's cluster keys are ignored with one warning each, its older forms read",
          "[config]") {
  const auto c = crucible::parse_experiment_config(R"(name: mnist
entrypoint: lib:Trial
labels: [tutorial]
workspace: ws
project: p
environment: {image: x}
bind_mounts: [{host_path: /a, container_path: /b}]
resources: {slots_per_trial: 1, resource_pool: gpu, max_slots: 4}
hyperparameters: {global_batch_size: 8}
searcher: {name: single, metric: validation_loss, max_length: {batches: 937}}
checkpoint_storage: {type: shared_fs, host_path: /tmp, storage_path: ckpt}
profiling: {enabled: true, begin_on_batch: 0, end_after_batch: null, sync_timings: true}
)",
                                                   "const.yaml");
  REQUIRE(c.warnings.size() == 8);
  // Determined's profiling keys take effect (no warning); a null end_after_batch is open.
  CHECK(c.profiling.enabled);
  CHECK(c.profiling.end_after_batch == -1);
  CHECK(c.profiling.profiles(1000000));
  CHECK_THAT(c.warnings[0], Catch::StartsWith("const.yaml:3:9: labels is ignored"));
  CHECK_THAT(c.warnings[5], Catch::StartsWith("const.yaml:8:48: resources.resource_pool"));
  CHECK_THAT(c.warnings[7], Catch::Contains("host_path /tmp/ckpt"));
  CHECK(c.checkpoint_storage.host_path == "/tmp/ckpt");
  CHECK(c.max_length == crucible::Length{crucible::LengthUnit::kBatches, 937});
  // Warnings are not part of the config: the resolved config reads back equal, without them.
  const auto again = crucible::parse_experiment_config(crucible::to_yaml(c), "again.yaml");
  CHECK((again == c));
  CHECK(again.warnings.empty());

  // The current form's ASHA length, max_time in time_metric units, is the trials' max_length.
  const auto current = crucible::parse_experiment_config(
      "name: m\nentrypoint: lib:Trial\nhyperparameters: {global_batch_size: 8}\n"
      "searcher: {name: adaptive_asha, metric: loss, max_trials: 4, max_time: 300, "
      "time_metric: records}\n",
      "adaptive.yaml");
  CHECK(current.max_length == crucible::Length{crucible::LengthUnit::kRecords, 300});
  // A single run's max_time is only its length: trainer's advice to train a finished run longer
  // (--set max_length.batches=N on its resume) replaces it.
  const auto longer = crucible::parse_experiment_config(
      "name: m\nentrypoint: lib:Trial\nhyperparameters: {global_batch_size: 8}\n"
      "searcher: {name: single, metric: loss, max_time: 300, time_metric: batches}\n",
      "single.yaml", {"max_length.batches=500"});
  CHECK(longer.max_length == crucible::Length{crucible::LengthUnit::kBatches, 500});
  // bracket_rungs: Determined's list, sorted most rungs first; a number stands for the brackets
  // the mode makes from it; 0 for none.
  const auto brackets = [](const std::string& mode, const std::string& value) {
    return crucible::parse_experiment_config(
               "name: m\nentrypoint: lib:Trial\nhyperparameters: {global_batch_size: 8}\n"
               "max_length: {batches: 64}\nsearcher: {name: adaptive_asha, metric: loss, "
               "max_trials: 4, mode: " +
                   mode + ", bracket_rungs: " + value + "}\n",
               "adaptive.yaml")
        .searcher.bracket_rungs;
  };
  CHECK(brackets("standard", "[2, 4, 3]") == std::vector<int64_t>{4, 3, 2});
  CHECK(brackets("aggressive", "[2, 4, 3]") == std::vector<int64_t>{4, 3, 2});
  CHECK(brackets("standard", "4") == std::vector<int64_t>{4, 3, 2});
  CHECK(brackets("conservative", "3") == std::vector<int64_t>{3, 2, 1});
  CHECK(brackets("aggressive", "3") == std::vector<int64_t>{3});
  CHECK(brackets("standard", "0").empty());
  CHECK(brackets("standard", "[]").empty());
  // A null max_length, the searcher's or the top-level one, is no value: max_time gives it.
  const std::string null_forms[] = {"searcher.max_length=null", "max_length=null"};
  for (const std::string& set : null_forms) {
    const auto with_null = crucible::parse_experiment_config(
        "name: m\nentrypoint: lib:Trial\nhyperparameters: {global_batch_size: 8}\n"
        "searcher: {name: adaptive_asha, metric: loss, max_trials: 4, max_time: 300, "
        "time_metric: batches, max_length: null}\n",
        "adaptive.yaml", {set});
    CHECK(with_null.max_length == crucible::Length{crucible::LengthUnit::kBatches, 300});
  }

  const std::string bad = error_of([] {
    crucible::parse_experiment_config(R"(name: mnist
entrypoint: lib:Trial
hyperparameters: {global_batch_size: 8}
max_length: {batches: 4}
checkpoint_storage: {type: shared_fs, storage_path: [a, b]}
)",
                                      "bad.yaml");
  });
  CHECK_THAT(bad, Catch::StartsWith("bad.yaml:5:53: checkpoint_storage.storage_path: expected a "
                                    "path"));
  // A host_path of the wrong type beside Determined's type: named at its place, as without it
  // (it was yaml-cpp's "bad conversion", at no key).
  CHECK(error_of([] {
          crucible::parse_experiment_config(
              "name: m\nentrypoint: lib:Trial\nhyperparameters: {global_batch_size: 8}\n"
              "max_length: {batches: 4}\ncheckpoint_storage: {type: shared_fs, host_path: [a]}\n",
              "listed.yaml");
        }) == "listed.yaml:5:50: checkpoint_storage.host_path: expected a string, got a list");
}

TEST_CASE(
    "a searcher key its searcher does not read is a warning, and left out of the resolved "
    "config while it has its default",
    "[config]") {
  const std::string file =
      "name: m\nentrypoint: lib:Trial\nhyperparameters: {global_batch_size: 8}\n"
      "max_length: {batches: 4}\nsearcher: {name: grid, max_trials: 9, divisor: 4, mode: "
      "aggressive, metric: loss}\n";
  const auto c = crucible::parse_experiment_config(file, "grid.yaml");
  // divisor has its default (as earlier versions wrote into every config.yaml): no warning.
  REQUIRE(c.warnings.size() == 2);
  CHECK(c.warnings[0] ==
        "grid.yaml:5:36: searcher.max_trials has no effect with searcher grid (a grid runs one "
        "trial per point): only random and adaptive_asha read it");
  CHECK(c.warnings[1] ==
        "grid.yaml:5:57: searcher.mode has no effect with searcher grid (a grid runs one trial "
        "per point): only adaptive_asha reads it");
  // max_trials and mode differ from their defaults and are kept; divisor is left out.
  const std::string resolved = crucible::to_yaml(c);
  CHECK_THAT(resolved, Catch::Contains("max_trials: 9") && Catch::Contains("mode: aggressive") &&
                           !Catch::Contains("divisor"));
  CHECK((crucible::parse_experiment_config(resolved, "again.yaml") == c));
  // The searchers that read them: no warning.
  const auto asha = crucible::parse_experiment_config(
      file, "grid.yaml", {"searcher.name=adaptive_asha", "searcher.max_concurrent_trials=2"});
  CHECK(asha.warnings.empty());
  CHECK_THAT(crucible::to_yaml(asha), Catch::Contains("divisor: 4"));
  const auto single = crucible::parse_experiment_config(
      file, "grid.yaml", {"searcher.name=single", "searcher.max_trials=null"});
  CHECK(single.warnings.size() == 1);  // mode
  // Without experiment_seed, only a random or ASHA search leaves the seed to be drawn; the
  // others use 0 and their resolved config says so.
  CHECK(c.reproducibility.experiment_seed == std::optional<uint64_t>(0));
  CHECK_THAT(resolved, Catch::Contains("experiment_seed: 0"));
  CHECK(asha.reproducibility.experiment_seed == std::nullopt);
  CHECK_THAT(crucible::to_yaml(asha), Catch::Contains("reproducibility: {}"));
}

TEST_CASE("every problem of an experiment file is in one error", "[config]") {
  const std::string message = error_of([] {
    crucible::parse_experiment_config(R"(name: mnist
entrypoint: lib:Trial
hyperparameters: {learning_rate: 1.0}
searcher: {name: single, metric: validation_loss, max_trials: many}
resources: {slots_per_trial: 0}
)",
                                      "const.yaml");
  });
  CHECK_THAT(message, Catch::StartsWith("const.yaml: 4 problems:"));
  CHECK_THAT(message, Catch::Contains("\n  const.yaml:3:18: hyperparameters.global_batch_size: "
                                      "required hyperparameter 'global_batch_size' is missing"));
  CHECK_THAT(message, Catch::Contains("searcher.max_trials"));
  CHECK_THAT(message, Catch::Contains("max_length"));
  CHECK_THAT(message, Catch::Contains("resources.slots_per_trial"));
  // An unknown key hides nothing else of its mapping, or of the file.
  const std::string unknown = error_of([] {
    crucible::parse_experiment_config(R"(name: mnist
entrypoint: lib:Trial
hyperparameters: {global_batch_size: 8}
max_length: {batches: 30}
optimizations:
  aggregation_frequency: 0
  gradient_clipping: {max_norm: 1, norm_typ: 2}
  max_consecutive_skip: 3
labelz: [a]
)",
                                      "opt.yaml");
  });
  CHECK_THAT(unknown, Catch::StartsWith("opt.yaml: 4 problems:"));
  CHECK_THAT(unknown, Catch::Contains("\n  opt.yaml:9:1: labelz: unknown key 'labelz'"));
  CHECK_THAT(unknown, Catch::Contains("\n  opt.yaml:8:3: optimizations.max_consecutive_skip: "
                                      "unknown key 'max_consecutive_skip' (did you mean "
                                      "'max_consecutive_skips'?)"));
  CHECK_THAT(unknown, Catch::Contains("\n  opt.yaml:6:26: optimizations.aggregation_frequency: "
                                      "must be at least 1, got 0"));
  CHECK_THAT(unknown, Catch::Contains("optimizations.gradient_clipping.norm_typ: unknown key"));
}
