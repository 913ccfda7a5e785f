// `cmake --install`, then a trial outside the tree built with find_package(crucible) and run by
// the installed `trainer`.
#include <cctype>
#include <sstream>

#include "catch.h"

#include "process.h"

using namespace crucible::testing;

namespace {

// The ';'-separated CMAKE_PREFIX_PATH where this build found LibTorch and the other dependencies,
// after `first` when it is not empty.
std::string dependency_prefixes(const std::string& first = "") {
  std::string prefixes = first;
  std::stringstream dependencies(CRUCIBLE_DEPENDENCY_PREFIXES);
  for (std::string p; std::getline(dependencies, p, ':');) {
    if (!p.empty()) prefixes += (prefixes.empty() ? "" : ";") + p;
  }
  return prefixes;
}

// `text` with each run of whitespace made one space (CMake wraps its messages).
std::string squeezed(const std::string& text) {
  std::string out;
  for (const char c : text) {
    const bool space = std::isspace(static_cast<unsigned char>(c)) != 0;
    if (!space || (!out.empty() && out.back() != ' ')) out += space ? ' ' : c;
  }
  return out;
}

}  // namespace

TEST_CASE("an out-of-tree trial builds against the installed package and trains", "[install]") {
  TempDir tmp;
  const std::string prefix = tmp / "prefix";
  const std::string project = std::string(CRUCIBLE_TEST_DATA) + "/install/out_of_tree";
  auto install =
      run_command("cmake --install " + std::string(CRUCIBLE_BUILD_DIR) + " --prefix " + prefix);
  INFO(install.output);
  REQUIRE(install.exit_code == 0);
  CHECK(util::exists(prefix + "/include/crucible/crucible.h"));
  CHECK(util::exists(prefix + "/lib/cmake/crucible/crucibleConfig.cmake"));
  CHECK(util::exists(prefix + "/lib/crucible/trials/libfashion_mnist.so"));

  const std::string build = tmp / "user-build";
  const std::string prefixes = dependency_prefixes(prefix);
  // As the README's snippet: no build type, and the trial is compiled optimized all the same.
  // ccache, where the machine has it, keeps the suite's repeated runs short.
  const bool ccache = run_command("command -v ccache").exit_code == 0;
  auto configure =
      run_command("cmake -S " + project + " -B " + build + " '-DCMAKE_PREFIX_PATH=" + prefixes +
                  "'" + (ccache ? " -DCMAKE_CXX_COMPILER_LAUNCHER=ccache" : ""));
  INFO(configure.output);
  REQUIRE(configure.exit_code == 0);
  CHECK_THAT(configure.output, Catch::Contains("crucible_add_trial(my_trial): no "
                                               "CMAKE_BUILD_TYPE; compiling it with the Release "
                                               "flags (-O3 -DNDEBUG)"));
  CHECK_THAT(read_file(build + "/CMakeFiles/my_trial.dir/flags.make"), Catch::Contains("-O3"));
  auto compile = run_command("cmake --build " + build + " -j2");
  INFO(compile.output);
  REQUIRE(compile.exit_code == 0);

  auto fit = run_command("CRUCIBLE_TRIAL_PATH=" + build + " " + prefix + "/bin/trainer fit " +
                         project + "/blobs.yaml --output " + (tmp / "run"));
  INFO(fit.output);
  REQUIRE(fit.exit_code == 0);
  auto rows = read_metrics(tmp / "run/metrics.jsonl");
  REQUIRE(!rows.empty());
  CHECK(rows.back()["metrics"]["validation_accuracy"].get<double>() > 0.95);

  // A plain main() of the user's runs the same experiment on two ranks through the public API.
  auto own = run_command("CRUCIBLE_TRIAL_PATH=" + build + " " + build + "/my_fit " + project +
                         "/blobs.yaml " + (tmp / "run2") + " 2");
  INFO(own.output);
  REQUIRE(own.exit_code == 0);
  CHECK_THAT(own.output, Catch::Contains("[rank 0] trained "));
  CHECK_THAT(own.output, Catch::Contains("[rank 1] trained "));
  CHECK_THAT(read_file(tmp / "run2/trainer.log"), Catch::Contains("2 ranks over gloo"));
  auto rows2 = read_metrics(tmp / "run2/metrics.jsonl");
  REQUIRE(!rows2.empty());
  CHECK(rows2.back()["metrics"]["validation_accuracy"].get<double>() > 0.95);

  // The same main() runs a grid search, each trial a run of the installed trainer.
  const std::string exp = tmp / "grid";
  auto search = run_command("CRUCIBLE_TRIAL_PATH=" + build + " " + build + "/my_fit " + project +
                            "/blobs_grid.yaml " + exp);
  INFO(search.output);
  REQUIRE(search.exit_code == 0);
  CHECK_THAT(search.output, Catch::Contains("search: 2 completed, best trial "));
  CHECK_THAT(read_file(exp + "/config.yaml"), Catch::Contains("name: grid"));
  int64_t completed = 0;
  for (const auto& row : read_metrics(exp + "/experiment.jsonl")) {
    completed += row["event"] == "completed";
  }
  CHECK(completed == 2);
  const std::string best = read_file(exp + "/best");
  CHECK_THAT(search.output, Catch::Contains(best.substr(0, best.find('\n'))));

  // The installed trainer also finds the installed example trials by name.
  auto check = run_command(prefix + "/bin/trainer check " + std::string(CRUCIBLE_SOURCE_DIR) +
                           "/configs/fashion_mnist_cnn.yaml");
  INFO(check.output);
  CHECK(check.exit_code == 0);
}

TEST_CASE("configuring where gloo's headers are missing stops, naming them and the fix",
          "[install]") {
  // A PyTorch wheel's LibTorch leaves them out; an empty folder given as theirs stands in here.
  TempDir tmp;
  const std::string empty = tmp / "no-gloo";
  util::create_directories(empty);
  const auto configure = run_command(
      "cmake -S " + std::string(CRUCIBLE_SOURCE_DIR) + " -B " + (tmp / "build") +
      " -DCRUCIBLE_BUILD_TESTS=OFF -DCRUCIBLE_BUILD_BENCHMARKS=OFF -DCRUCIBLE_GLOO_INCLUDE_DIR=" +
      empty + " '-DCMAKE_PREFIX_PATH=" + dependency_prefixes() + "'");
  INFO(configure.output);
  CHECK(configure.exit_code != 0);
  const std::string message = squeezed(configure.output);
  CHECK_THAT(message, Catch::Contains("gloo's headers (gloo/algorithm.h) were not found "
                                      "(CRUCIBLE_GLOO_INCLUDE_DIR: " +
                                      empty + ")"));
  CHECK_THAT(message, Catch::Contains("a PyTorch wheel's LibTorch leaves them out"));
  CHECK_THAT(message, Catch::Contains("Debian: libgloo-dev"));
  CHECK(!util::exists(tmp / "build/Makefile"));
}
