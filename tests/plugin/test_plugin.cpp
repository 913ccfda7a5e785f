#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "catch.h"
#include "files.h"

#include <crucible/errors.h>

#include "plugin/loader.h"
#include "util/file_system.h"

using crucible::plugin::resolve_entrypoint;
using crucible::testing::TempDir;

namespace {

std::string plugin_error(const std::string& entrypoint) {
  try {
    resolve_entrypoint(entrypoint, "");
  } catch (const crucible::PluginError& e) {
    CHECK(e.exit_code() == crucible::kExitPlugin);
    return e.what();
  }
  FAIL("expected a PluginError for " << entrypoint);
  return "";
}

}  // namespace

TEST_CASE("a registered trial is found by library name and class", "[plugin]") {
  auto factory = resolve_entrypoint("crucible_test_trials:RecordingTrial", "");
  CHECK(factory.name == "RecordingTrial");
  CHECK(factory.overrides_evaluate_batch);
  CHECK_FALSE(factory.overrides_evaluate_full_dataset);
  auto both = resolve_entrypoint("crucible_test_trials:BothEvalTrial", "");
  CHECK(both.overrides_evaluate_batch);
  CHECK(both.overrides_evaluate_full_dataset);
  auto neither = resolve_entrypoint("crucible_test_trials:NeitherEvalTrial", "");
  CHECK_FALSE(neither.overrides_evaluate_batch);
  CHECK_FALSE(neither.overrides_evaluate_full_dataset);
}

TEST_CASE(
    "a class named with its namespace is looked for in the library, which says how it is named",
    "[plugin]") {
  CHECK_THAT(plugin_error("crucible_test_trials:crucible::testing::RecordingTrial"),
             Catch::StartsWith("trial class 'crucible::testing::RecordingTrial' is not registered "
                               "in ") &&
                 Catch::EndsWith("(CRUCIBLE_REGISTER_TRIAL registers a class without its "
                                 "namespace: name it 'RecordingTrial' in the entrypoint)"));
  CHECK_THAT(plugin_error("crucible_test_trials::RecordingTrial"),
             Catch::Contains("is not of the form <library>:<TrialClass>"));
}

TEST_CASE("a trial library can be named by path", "[plugin]") {
  const std::string path = std::string(CRUCIBLE_BIN_DIR) + "/libcrucible_test_trials.so";
  CHECK(resolve_entrypoint(path + ":RecordingTrial", "").name == "RecordingTrial");
}

TEST_CASE("a missing library lists where the loader looked", "[plugin]") {
  const std::string message = plugin_error("no_such_trials:X");
  CHECK_THAT(message, Catch::StartsWith("trial library 'no_such_trials' not found; looked in:"));
  CHECK_THAT(message, Catch::Contains(std::string(CRUCIBLE_BIN_DIR) + "/libno_such_trials.so"));
  CHECK_THAT(plugin_error("./nowhere/lib.so:X"), Catch::Contains("nowhere/lib.so"));
}

TEST_CASE("CRUCIBLE_TRIAL_PATH directories are searched first", "[plugin]") {
  setenv("CRUCIBLE_TRIAL_PATH", "/opt/a:/opt/b", 1);
  auto dirs = crucible::plugin::search_directories("/cfg");
  unsetenv("CRUCIBLE_TRIAL_PATH");
  REQUIRE(dirs.size() >= 3);
  CHECK(dirs[0] == "/opt/a");
  CHECK(dirs[1] == "/opt/b");
  CHECK(dirs[2] == "/cfg");
  // A directory named twice (also as /opt/a/, or as the config's own) is searched and listed once.
  setenv("CRUCIBLE_TRIAL_PATH", "/opt/a:/cfg:/opt/a/", 1);
  dirs = crucible::plugin::search_directories("/cfg");
  unsetenv("CRUCIBLE_TRIAL_PATH");
  REQUIRE(dirs.size() >= 2);
  CHECK(dirs[0] == "/opt/a");
  CHECK(dirs[1] == "/cfg");
  CHECK(std::count(dirs.begin(), dirs.end(), "/cfg") == 1);
  CHECK(std::count(dirs.begin(), dirs.end(), "/opt/a/") == 0);
}

TEST_CASE("a directory by a library's name is listed as not a file", "[plugin]") {
  TempDir tmp;
  crucible::util::create_directories(tmp / "dir.so");
  const std::string message = plugin_error(tmp / "dir.so:X");
  CHECK_THAT(message, Catch::StartsWith("trial library '" + tmp / "dir.so" + "' not found") &&
                          Catch::Contains(tmp / "dir.so (not a file: a directory or other)"));
}

TEST_CASE("a file that is not a shared library cannot be loaded", "[plugin]") {
  CHECK_THAT(plugin_error("crucible_garbage:X"), Catch::StartsWith("cannot load trial library"));
}

TEST_CASE("a shared library without trials is not a trial library", "[plugin]") {
  CHECK_THAT(plugin_error("crucible_not_a_trial:X"),
             Catch::Contains("is not a Crucible trial library: it registers no trial"));
}

TEST_CASE("an ABI stamp mismatch is refused, showing both stamps", "[plugin]") {
  const std::string message = plugin_error("crucible_abi_mismatch:RecordingTrial");
  CHECK_THAT(message, Catch::Contains("built for a different Crucible/LibTorch ABI"));
  CHECK_THAT(message, Catch::Contains("library: crucible 0.0.1, libtorch 9.9, cxx11-abi 0"));
  CHECK_THAT(message,
             Catch::Contains(std::string("trainer: ") + crucible::plugin::own_abi_stamp()));
}

TEST_CASE("a class name registered twice in one library is refused, not picked", "[plugin]") {
  CHECK_THAT(plugin_error("crucible_duplicate_names:Net"),
             Catch::Contains("trial class 'Net' is registered more than once in") &&
                 Catch::Contains("give the classes distinct names"));
}

TEST_CASE("an unknown class lists the classes the library registers", "[plugin]") {
  CHECK_THAT(plugin_error("crucible_test_trials:RecordngTrial"),
             Catch::Contains("trial class 'RecordngTrial' is not registered in") &&
                 Catch::Contains(
                     "it registers: RecordingTrial, ResumableTrial, ReducerTrial, BatchNormTrial, "
                     "EmaTrial, ClippingTrial, IdleLayerTrial, FreezeTrial, BothEvalTrial, "
                     "NeitherEvalTrial, ThrowingCtorTrial"));
}

TEST_CASE(
    "a search directory that cannot be looked up is passed over, and named when nothing is found",
    "[plugin]") {
  // A loop of symbolic links where the library's file would be: neither there nor missing.
  const std::string dir = std::string(CRUCIBLE_BIN_DIR) + "/../plugin-loop-test";
  crucible::util::create_directories(dir);
  for (const char* name : {"libcrucible_test_trials.so", "libno_such_trials.so"}) {
    const std::string link = dir + "/" + name;
    crucible::util::remove(link);
    REQUIRE(::symlink(link.c_str(), link.c_str()) == 0);
  }
  setenv("CRUCIBLE_TRIAL_PATH", dir.c_str(), 1);
  CHECK(resolve_entrypoint("crucible_test_trials:RecordingTrial", "").name == "RecordingTrial");
  const std::string message = plugin_error("no_such_trials:X");
  unsetenv("CRUCIBLE_TRIAL_PATH");
  CHECK_THAT(message, Catch::Contains("cannot look up " + dir + "/libno_such_trials.so: ") &&
                          Catch::Contains(std::strerror(ELOOP)));
  crucible::util::remove_all(dir);
}
