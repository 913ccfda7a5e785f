// `cmake --install`, then a trial outside the tree built with find_package(crucible) and run by
// the installed `trainer`.
#include <cctype>
#include <fstream>
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

// "cmake -G <this build's generator> ": every project the tests configure is generated as this
// build was, with the build tool this machine is known to have.
std::string cmake_with_generator() {
  return std::string("cmake -G '") + CRUCIBLE_CMAKE_GENERATOR + "' ";
}

// What the generator wrote of the target whose CMakeFiles folder is `target_dir` in build tree
// `build`: its file `name` (link.txt, flags.make) under a Makefile generator, else the whole
// build.ninja, which holds every target's commands (Ninja).
std::string generated(const std::string& build, const std::string& target_dir,
                      const std::string& name) {
  const std::string file = util::join(util::join(build, target_dir), name);
  return read_file(util::exists(file) ? file : util::join(build, "build.ninja"));
}

// Installs this build into `prefix`; requires that it succeeds.
void install_into(const std::string& prefix) {
  const auto install =
      run_command("cmake --install " + std::string(CRUCIBLE_BUILD_DIR) + " --prefix " + prefix);
  INFO(install.output);
  REQUIRE(install.exit_code == 0);
}

// The C++ compiler of this build, made into one with no shared libstdc++, as some toolchains
// are: a script in `dir` that names no file for libstdc++.so and links the static copy.
std::string compiler_without_shared_libstdcxx(const std::string& dir) {
  util::create_directories(dir);
  const std::string path = util::join(dir, "g++");
  std::ofstream(path)
      << "#!/bin/sh\n"
         "for a in \"$@\"; do\n"
         "  [ \"$a\" = -print-file-name=libstdc++.so ] && { echo libstdc++.so; exit 0; }\n"
         "done\n"
         "exec '" CRUCIBLE_CXX_COMPILER "' \"$@\" -static-libstdc++\n";
  REQUIRE(run_command("chmod +x " + path).exit_code == 0);
  return path;
}

// The library a configure run's output says it links for a compiler with no shared libstdc++;
// empty when it says nothing of the kind.
std::string linked_libstdcxx(const std::string& configure_output) {
  const std::string said = "has no shared libstdc++: linking LibTorch's ";
  const auto at = configure_output.find(said);
  if (at == std::string::npos) return "";
  const auto begin = at + said.size();
  return configure_output.substr(begin, configure_output.find_first_of(" \n", begin) - begin);
}

}  // namespace

TEST_CASE("an out-of-tree trial builds against the installed package and trains", "[install]") {
  TempDir tmp;
  const std::string prefix = tmp / "prefix";
  const std::string project = std::string(CRUCIBLE_TEST_DATA) + "/install/out_of_tree";
  install_into(prefix);
  CHECK(util::exists(prefix + "/include/crucible/crucible.h"));
  CHECK(util::exists(prefix + "/lib/cmake/crucible/crucibleConfig.cmake"));
  CHECK(util::exists(prefix + "/lib/crucible/trials/libfashion_mnist.so"));

  const std::string build = tmp / "user-build";
  const std::string prefixes = dependency_prefixes(prefix);
  // As the README's snippet: no build type, and the trial is compiled optimized all the same.
  // ccache, where the machine has it, keeps the suite's repeated runs short.
  const bool ccache = run_command("command -v ccache").exit_code == 0;
  auto configure = run_command(cmake_with_generator() + "-S " + project + " -B " + build +
                               " '-DCMAKE_PREFIX_PATH=" + prefixes + "'" +
                               (ccache ? " -DCMAKE_CXX_COMPILER_LAUNCHER=ccache" : ""));
  INFO(configure.output);
  REQUIRE(configure.exit_code == 0);
  CHECK_THAT(configure.output, Catch::Contains("crucible_add_trial(my_trial): no "
                                               "CMAKE_BUILD_TYPE; compiling it with the Release "
                                               "flags (-O3 -DNDEBUG)"));
  CHECK_THAT(generated(build, "CMakeFiles/my_trial.dir", "flags.make"), Catch::Contains("-O3"));
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
      cmake_with_generator() + "-S " + std::string(CRUCIBLE_SOURCE_DIR) + " -B " + (tmp / "build") +
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
  CHECK_FALSE(util::exists(tmp / "build/Makefile"));
  CHECK_FALSE(util::exists(tmp / "build/build.ninja"));
}

TEST_CASE(
    "under a compiler with only a static libstdc++, the tree and a user's project link "
    "LibTorch's shared one",
    "[install]") {
  // Two copies of libstdc++ in one process (the compiler's static one, LibTorch's shared one)
  // abort where a stream made by one is destroyed by the other.
  TempDir tmp;
  const std::string compiler = compiler_without_shared_libstdcxx(tmp / "toolchain");
  const std::string tree = tmp / "tree";
  const auto configure = run_command(
      cmake_with_generator() + "-S " + std::string(CRUCIBLE_SOURCE_DIR) + " -B " + tree +
      " -DCRUCIBLE_BUILD_TESTS=OFF -DCRUCIBLE_BUILD_BENCHMARKS=OFF -DCMAKE_CXX_COMPILER=" +
      compiler + " '-DCMAKE_PREFIX_PATH=" + dependency_prefixes() + "'");
  INFO(configure.output);
  REQUIRE(configure.exit_code == 0);
  const std::string libstdcxx = linked_libstdcxx(squeezed(configure.output));
  CHECK(util::file_name(libstdcxx) == "libstdc++.so.6");
  REQUIRE(util::exists(libstdcxx));
  for (const char* target : {"framework/CMakeFiles/crucible.dir", "tools/CMakeFiles/trainer.dir",
                             "trials/CMakeFiles/fashion_mnist.dir"}) {
    INFO(target);
    CHECK_THAT(generated(tree, target, "link.txt"), Catch::Contains(libstdcxx));
  }

  const std::string prefix = tmp / "prefix";
  install_into(prefix);
  const std::string user = tmp / "user-build";
  const auto user_configure =
      run_command(cmake_with_generator() + "-S " + std::string(CRUCIBLE_TEST_DATA) +
                  "/install/out_of_tree -B " + user + " -DCMAKE_CXX_COMPILER=" + compiler +
                  " '-DCMAKE_PREFIX_PATH=" + dependency_prefixes(prefix) + "'");
  INFO(user_configure.output);
  REQUIRE(user_configure.exit_code == 0);
  CHECK(linked_libstdcxx(squeezed(user_configure.output)) == libstdcxx);
  for (const char* target : {"my_fit", "my_trial"}) {
    INFO(target);
    CHECK_THAT(generated(user, std::string("CMakeFiles/") + target + ".dir", "link.txt"),
               Catch::Contains(libstdcxx));
  }

  // This build's own compiler: only one without a shared libstdc++ gets LibTorch's linked.
  const auto own = run_command("'" CRUCIBLE_CXX_COMPILER "' -print-file-name=libstdc++.so");
  const bool own_has_shared = own.output.rfind('/', 0) == 0;
  const std::string own_link =
      generated(CRUCIBLE_BUILD_DIR, "framework/CMakeFiles/crucible.dir", "link.txt");
  CHECK((own_link.find(libstdcxx) == std::string::npos) == own_has_shared);
}
