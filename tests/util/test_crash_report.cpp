// util::CrashReports through the real `trainer`: a trial that crashes (a bad memory access,
// abort()) is named with its place in the report on stderr and in trainer.log, the process dies of
// the signal, and the run resumes to the end of one that never crashed.
#include <signal.h>

#include <ctime>
#include <regex>
#include <string>

#include "catch.h"

#include "resumable_run.h"

using namespace crucible::testing;

namespace {

const std::string kShort = " --set max_length.batches=48 --quiet";

// Under AddressSanitizer and UndefinedBehaviorSanitizer (tools/sanitize.sh) a write through a
// null pointer is reported by the sanitizer, which then calls abort().
#if defined(__SANITIZE_ADDRESS__)
constexpr int kBadAccessSignal = SIGABRT;
#else
constexpr int kBadAccessSignal = SIGSEGV;
#endif

std::string signal_name(int sig) { return sig == SIGSEGV ? "SIGSEGV" : "SIGABRT"; }

// The year, month and day of now in UTC, as the log's stamps write them.
std::string utc_date() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char date[16];
  std::strftime(date, sizeof(date), "%Y-%m-%d", &tm);
  return date;
}

// Requires of the output and the run of a process that crashed with `sig` at `place` (a regular
// expression) the report's line, "error: PREFIX crashed with ... PLACE; continue the run with:
// trainer fit --resume RUN", the stack with `frame` (a mangled name of the trial library's) on the
// console, and the same line, stamped, as an ERROR line of trainer.log with the stack after it.
void check_report(const CommandResult& r, const std::string& run, int sig,
                  const std::string& prefix, const std::string& place, const std::string& frame) {
  INFO(r.output);
  CHECK(r.exit_code == 128 + sig);
  const std::string cause = sig == SIGSEGV ? R"(a memory access at 0x0, which is not mapped)"
                                           : R"(abort\(\) was called: .*)";
  const std::string line = prefix + "crashed with " + signal_name(sig) + " \\(" + cause + "\\) " +
                           place + "; continue the run with: trainer fit --resume " + run;
  CHECK(std::regex_search(r.output, std::regex("(^|\n)(\\[rank 1\\] )?error: " + line + "\n")));
  CHECK_THAT(r.output, Catch::Contains("native stack of the crashing thread, innermost frame "
                                       "first:\n") &&
                           Catch::Contains("libcrucible_test_trials.so(") &&
                           Catch::Contains(frame));
  if (!prefix.empty()) return;  // a rank other than 0 has no log file
  const std::string log = read_file(run + "/trainer.log");
  INFO(log);
  CHECK(std::regex_search(
      log, std::regex("\n" + utc_date() + "T[0-2][0-9]:[0-5][0-9]:[0-5][0-9]Z ERROR " + line +
                      "\nnative stack of the crashing thread, innermost frame first:\n")));
  CHECK_THAT(log, Catch::Contains(frame));
}

}  // namespace

TEST_CASE(
    "a trial that crashes in train_batch, in its dataset or in abort() is named with the place, "
    "and the run resumes whole",
    "[util][crash]") {
  ResumableRuns runs;
  const auto reference =
      run_command(kTrainer + " fit " + runs.config + kShort + " --output " + runs.reference);
  INFO(reference.output);
  REQUIRE(reference.exit_code == 0);
  struct Crash {
    std::string spec;   // CRUCIBLE_TEST_CRASH
    int signal;         // the signal the process dies of
    std::string place;  // a regular expression
    std::string frame;  // a function of the trial library on the stack
  };
  for (const Crash& crash :
       {Crash{"segv@37", kBadAccessSignal, R"(in train_batch \(batch 37\))", "11train_batch"},
        Crash{"abort@37", SIGABRT, R"(in train_batch \(batch 37\))", "11train_batch"},
        Crash{"loader@40", kBadAccessSignal,
              R"(in the dataset's get_batch \(epoch 1, batch [0-9]+\))", "9get_batch"}}) {
    INFO(crash.spec);
    const std::string run = runs.tmp / crash.spec;
    const auto crashed = run_command("CRUCIBLE_TEST_CRASH=" + crash.spec + " " + kTrainer +
                                     " fit " + runs.config + kShort + " --output " + run);
    check_report(crashed, run, crash.signal, "", crash.place, crash.frame);
    CHECK(latest(run) >= "batch-0000000032");
    finish_after_fault(runs.reference, run, "", 48);
  }
}

TEST_CASE(
    "a crash on rank 1 of 2: the rank names itself and the place, the launcher names the "
    "signal, the run resumes whole",
    "[util][crash]") {
  ResumableRuns runs;
  const std::string slots = kShort + " --slots 2";
  const auto reference =
      run_command(kTrainer + " fit " + runs.config + slots + " --output " + runs.reference);
  INFO(reference.output);
  REQUIRE(reference.exit_code == 0);
  const std::string run = runs.tmp / "crashed";
  const auto crashed = run_command("CRUCIBLE_TEST_CRASH=segv@37/1 " + kTrainer + " fit " +
                                   runs.config + slots + " --output " + run);
  INFO(crashed.output);
  check_report(crashed, run, kBadAccessSignal, "rank 1: ", R"(in train_batch \(batch 37\))",
               "11train_batch");
  CHECK_THAT(crashed.output, Catch::Contains("error: rank 1 was killed by signal " +
                                             std::to_string(kBadAccessSignal)));
  CHECK(latest(run) == "batch-0000000032");
  finish_after_fault(runs.reference, run, "", 48);
}
