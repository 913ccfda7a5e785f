// The built-in launcher over real dist_worker processes: rank variables, prefixed output, and
// supervision that stops every worker when one fails, leaving none behind.
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <sstream>
#include <thread>

#include "catch.h"

#include <crucible/errors.h>

#include "launch/launcher.h"
#include "process.h"

using crucible::launch::launch;
using crucible::launch::LaunchOptions;
using namespace crucible::testing;

namespace {

const std::string kWorker = std::string(CRUCIBLE_BIN_DIR) + "/dist_worker";

// An argument dist_worker ignores that marks the workers of this test process.
const std::string kMarker = "launch-test-" + std::to_string(getpid());

LaunchOptions workers(int64_t slots, const std::string& mode) {
  return LaunchOptions()
      .command({kWorker, mode, kMarker})
      .slots(slots)
      .grace(std::chrono::milliseconds(2000));
}

// The lines of `text` that start with `prefix`, without it.
std::vector<std::string> lines_of(const std::string& text, const std::string& prefix) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(prefix, 0) == 0) out.push_back(line.substr(prefix.size()));
  }
  return out;
}

// Process ids of live dist_worker processes this test process launched.
std::vector<std::string> live_workers() {
  std::vector<std::string> out;
  std::istringstream in(run_command("pgrep -f -- '" + kMarker + "$'").output);
  for (std::string pid; in >> pid;) out.push_back(pid);
  return out;
}

// Whether mask `field` ("SigCgt:", "SigIgn:") of process `pid` in /proc holds signal `sig`.
bool signal_in_mask(const std::string& pid, const std::string& field, int sig) {
  std::istringstream status(read_file("/proc/" + pid + "/status"));
  for (std::string line; std::getline(status, line);) {
    if (line.rfind(field, 0) == 0) {
      return (std::stoull(line.substr(field.size()), nullptr, 16) >> (sig - 1)) & 1;
    }
  }
  return false;
}

bool catches_sigint(const std::string& pid) { return signal_in_mask(pid, "SigCgt:", SIGINT); }
bool ignores_sigterm(const std::string& pid) { return signal_in_mask(pid, "SigIgn:", SIGTERM); }

}  // namespace

TEST_CASE("the launcher starts ranked workers and prefixes their output", "[launch]") {
  std::ostringstream out, err;
  const auto result = launch(workers(3, "collectives"), out, err);
  INFO(out.str() << err.str());
  CHECK(result.exit_code == 0);
  CHECK(result.failure.empty());
  for (int r = 0; r < 3; ++r) {
    const auto lines = lines_of(out.str(), "[rank " + std::to_string(r) + "] ");
    REQUIRE(lines.size() == 1);
    const auto j = nlohmann::json::parse(lines[0]);
    CHECK(j["rank"] == r);
    CHECK(j["size"] == 3);
    CHECK(j["local_rank"] == r);
    CHECK(j["sum"][0] == 6.0);
    // The workers share the cores: OMP_NUM_THREADS = cores / slots unless the user set it.
    const char* user = std::getenv("OMP_NUM_THREADS");
    const int cores = static_cast<int>(std::thread::hardware_concurrency());
    CHECK(j["torch_threads"] == (user ? std::atoi(user) : std::max(1, cores / 3)));
  }
}

TEST_CASE("a worker that dies stops the others: the launcher names it", "[launch]") {
  std::ostringstream out, err;
  const auto result = launch(workers(3, "die"), out, err);
  INFO(out.str() << err.str());
  CHECK(result.exit_code == 3);
  CHECK_THAT(result.failure, Catch::StartsWith("rank 1 exited with code 3; the other ranks were "
                                               "stopped. Rank 1's last lines:"));
  CHECK(live_workers().empty());
}

TEST_CASE("a process a worker leaves running does not keep the launcher waiting", "[launch]") {
  std::ostringstream out, err;
  const auto started = std::chrono::steady_clock::now();
  const auto result = launch(workers(1, "orphan"), out, err);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  INFO(out.str() << err.str());
  // Its child holds the pipes for 30 s; the launcher reads them 2 s more after the worker ends.
  CHECK(result.exit_code == 0);
  CHECK(seconds < 15);
  CHECK_THAT(out.str(), Catch::Contains("[rank 0] left a child behind"));
  for (const auto& pid : live_workers()) ::kill(std::stoi(pid), SIGKILL);
}

TEST_CASE("two SIGINTs to the launcher are the user's stop, not a rank's failure", "[launch]") {
  std::ostringstream out, err;
  // The launcher passes each SIGINT this process gets on to its workers, which end at the second.
  // The first goes once both workers catch SIGINT (a worker still loading would die of it), the
  // second 1.5 s later.
  std::thread user([] {
    wait_until([] {
      const auto pids = live_workers();
      return pids.size() == 2 && std::all_of(pids.begin(), pids.end(), catches_sigint);
    });
    for (int i = 0; i < 2; ++i) {
      if (i > 0) std::this_thread::sleep_for(std::chrono::milliseconds(1500));
      ::kill(::getpid(), SIGINT);
    }
  });
  const auto result = launch(workers(2, "interrupted"), out, err);
  user.join();
  INFO(out.str() << err.str());
  CHECK(result.exit_code == crucible::kExitInterrupted);
  CHECK(result.failure == "interrupted twice: every rank stopped at once, without a checkpoint");
  CHECK(live_workers().empty());
}

namespace {

// Launches 2 workers in `mode`, sends this process SIGTERM (which the launcher passes on) once
// `ready` holds of the two workers' pids, and checks that the launcher ends as the user's stop,
// with `failure`.
void check_passed_on_stop(const std::string& mode, bool (*ready)(const std::vector<std::string>&),
                          const std::string& failure) {
  std::ostringstream out, err;
  std::thread user([ready] {
    wait_until([ready] {
      const auto pids = live_workers();
      return pids.size() == 2 && ready(pids);
    });
    ::kill(::getpid(), SIGTERM);
  });
  const auto result = launch(workers(2, mode), out, err);
  user.join();
  INFO(out.str() << err.str());
  CHECK(result.exit_code == 128 + SIGTERM);
  CHECK(result.failure == failure);
  CHECK(live_workers().empty());
}

}  // namespace

TEST_CASE("a stop signal that ends workers before they handle it is the user's stop, not a failure",
          "[launch]") {
  // The workers handle SIGINT only: the SIGTERM passed on ends them as it would a rank that is
  // still starting.
  check_passed_on_stop(
      "interrupted",
      [](const std::vector<std::string>& pids) {
        return std::all_of(pids.begin(), pids.end(), catches_sigint);
      },
      "signal 15 (Terminated), passed on to the ranks, ended ranks 0, 1 before they handled it");
}

TEST_CASE("a rank that loses the peers a stop signal ended is not blamed either", "[launch]") {
  // Rank 0 ignores SIGTERM and waits for rank 1 in an all-reduce; the SIGTERM passed on ends rank
  // 1, and rank 0 then fails for want of its peer.
  check_passed_on_stop(
      "one_ignores_sigterm",
      [](const std::vector<std::string>& pids) {
        return std::any_of(pids.begin(), pids.end(), ignores_sigterm);
      },
      "signal 15 (Terminated), passed on to the ranks, ended rank 1 before it handled it; the "
      "others lost their peers and were stopped");
}

TEST_CASE("the launcher blames the rank that failed on its own, by exit status", "[launch]") {
  // Rank 1 prints the words of a lost peer and fails with TrainingError's code about 0.3 s after
  // ranks 0 and 2 gave up on it (kExitPeerLost), well within the launcher's 1 s blame window. The
  // blame goes by status, not by the output or by who failed first.
  std::ostringstream out, err;
  setenv("CRUCIBLE_TEST_TIMEOUT_S", "2", 1);
  const auto result = launch(workers(3, "misleading"), out, err);
  unsetenv("CRUCIBLE_TEST_TIMEOUT_S");
  INFO(out.str() << err.str());
  CHECK(result.exit_code == crucible::kExitTrainingFailed);
  CHECK_THAT(result.failure, Catch::StartsWith("rank 1 exited with code 1; the other ranks were "
                                               "stopped. Rank 1's last lines:"));
  CHECK_THAT(result.failure, !Catch::Contains("stopped responding"));
  CHECK(live_workers().empty());
}

TEST_CASE("a hung worker is killed once the others fail", "[launch]") {
  auto options = workers(3, "hang");
  std::ostringstream out, err;
  setenv("CRUCIBLE_TEST_TIMEOUT_S", "2", 1);
  const auto started = std::chrono::steady_clock::now();
  const auto result = launch(options, out, err);
  unsetenv("CRUCIBLE_TEST_TIMEOUT_S");
  INFO(out.str() << err.str());
  CHECK(result.exit_code == crucible::kExitPeerLost);
  CHECK_THAT(result.failure, Catch::Contains("exited with code 5") &&
                                 Catch::Contains("allreduce across ranks failed"));
  CHECK(std::chrono::steady_clock::now() - started < std::chrono::seconds(20));
  CHECK_THAT(err.str(), Catch::Contains("[rank 0] error: rank 0: allreduce across ranks failed"));
  CHECK(live_workers().empty());
}

TEST_CASE("a worker command that cannot run is reported with its output", "[launch]") {
  std::ostringstream out, err;
  const auto result = launch(LaunchOptions().command({"/nonexistent/worker"}).slots(2), out, err);
  CHECK(result.exit_code == 127);
  CHECK_THAT(result.failure, Catch::Contains("exited with code 127") &&
                                 Catch::Contains("cannot exec rank") &&
                                 Catch::Contains("/nonexistent/worker"));
}
