#include <fstream>
#include <sstream>

#include "catch.h"

#include <crucible/config.h>
#include <crucible/errors.h>

#include "config/suggest.h"
#include "util/file_system.h"

namespace fs = crucible::util;
using crucible::ConfigError;
using crucible::parse_experiment_config;

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

TEST_CASE("defaults fill what the file omits", "[config]") {
  auto c = parse_experiment_config(kMinimal, "mem.yaml");
  CHECK(c.name == "demo");
  CHECK(c.global_batch_size() == 16);
  CHECK(c.max_length == crucible::Length{crucible::LengthUnit::kEpochs, 2});
  CHECK(c.min_validation_period.value == 0);
  CHECK(c.searcher.name == "single");
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

TEST_CASE("YAML core-schema typing of scalars", "[config]") {
  auto c = parse_experiment_config(R"(name: t
entrypoint: l:T
hyperparameters: {global_batch_size: 4, a: "12", b: 1e-3, c: true, d: 0x10, e: null, f: 3.0}
max_length: {batches: 1}
)",
                                   "t.yaml");
  auto hp = c.constant_hyperparameters();
  CHECK(hp["a"] == "12");
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

TEST_CASE("every shipped config in configs/ is valid", "[config]") {
  int n = 0;
  const std::string configs = fs::join(CRUCIBLE_SOURCE_DIR, "configs");
  for (const auto& name : fs::list_directory(configs)) {
    INFO(name);
    CHECK_NOTHROW(crucible::load_experiment_config(fs::join(configs, name)));
    ++n;
  }
  CHECK(n >= 4);
}

TEST_CASE("did-you-mean suggests only near keys", "[config]") {
  using crucible::config::nearest;
  CHECK(nearest("max_lenght", {"max_length", "name"}) == "max_length");
  CHECK(nearest("hyperparameter", {"hyperparameters", "name"}) == "hyperparameters");
  CHECK(nearest("zzzzzz", {"max_length", "name"}).empty());
}
