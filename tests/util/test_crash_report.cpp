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

// The signal a bad memory access kills the process with: under AddressSanitizer
// (tools/sanitize.sh) ASan's handler takes the fault after the report, and aborts.
constexpr int kBadAccessReported = SIGSEGV;
#if defined(CRUCIBLE_TEST_ASAN)
constexpr int kBadAccessExit = SIGABRT;
#else
constexpr int kBadAccessExit = SIGSEGV;
#endif

// A crash a test asks for, and what its report must say.
struct Crash {
  std::string spec;   // CRUCIBLE_TEST_CRASH (tests/support/trial_pieces.h)
  int reported;       // the signal the report names
  int exit_signal;    // the signal the process dies of
  std::string place;  // a regular expression
  std::string frame;  // a function of the trial library on the stack (mangled)
};

std::string signal_name(int sig) { return sig == SIGSEGV ? "SIGSEGV" : "SIGABRT"; }

// `text` with every character that a regular expression gives a meaning escaped.
std::string escaped(const std::string& text) {
  return std::regex_replace(text, std::regex(R"([.^$|()\[\]{}*+?\\])"), R"(\$&)");
}

// The year, month and day of now in UTC, as the log's stamps write them.
std::string utc_date() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char date[16];
  std::strftime(date, sizeof(date), "%Y-%m-%d", &tm);
  return date;
}

// Runs `command` with `crash`'s CRUCIBLE_TEST_CRASH. Requires: it died of crash.exit_signal;
// its output holds the report's line, "error: PREFIX crashed with SIGNAL (CAUSE) PLACE; continue
// the run with: trainer fit --resume RUN" (without "; continue..." when `run` is ""), and the
// stack with crash.frame; and, for a run's chief (no prefix), trainer.log holds the same line,
// stamped with today's UTC date, as an ERROR line with the stack after it.
void check_crash(const Crash& crash, const std::string& command, const std::string& run,
                 const std::string& prefix = "") {
  INFO(crash.spec);
  const std::string before = utc_date();
  const auto r = run_command("CRUCIBLE_TEST_CRASH=" + crash.spec + " " + command);
  const std::string after = utc_date();
  INFO(r.output);
  CHECK(r.exit_code == 128 + crash.exit_signal);
  const std::string cause = crash.reported == SIGSEGV
                                ? R"(a memory access at 0x8, which is not mapped)"
                                : R"(abort\(\) was called: .*)";
  const std::string line =
      prefix + "crashed with " + signal_name(crash.reported) + " \\(" + cause + "\\) " +
      crash.place +
      (run.empty() ? "" : "; continue the run with: trainer fit --resume " + escaped(run));
  CHECK(std::regex_search(r.output, std::regex("(^|\n)(\\[rank 1\\] )?error: " + line + "\n")));
  CHECK_THAT(r.output, Catch::Contains("native stack of the crashing thread, innermost frame "
                                       "first:\n") &&
                           Catch::Contains("libcrucible_test_trials.so(") &&
                           Catch::Contains(crash.frame));
  if (run.empty() || !prefix.empty()) return;  // a rank other than 0 has no log file
  const std::string log = read_file(run + "/trainer.log");
  INFO(log);
  CHECK(std::regex_search(
      log, std::regex("\n(" + before + "|" + after + ")T[0-2][0-9]:[0-5][0-9]:[0-5][0-9]Z ERROR " +
                      line + "\nnative stack of the crashing thread, innermost frame first:\n")));
  CHECK_THAT(log, Catch::Contains(crash.frame));
}

}  // namespace

TEST_CASE(
    "a trial that crashes in train_batch, in its dataset or in abort() is named with the place, "
    "and the run resumes whole",
    "[util][crash]") {
  ResumableRuns runs;
  const std::string fit = kTrainer + " fit " + runs.config + kShort;
  const auto reference = run_command(fit + " --output " + runs.reference);
  INFO(reference.output);
  REQUIRE(reference.exit_code == 0);
  for (const Crash& crash : {
           Crash{"segv@37", kBadAccessReported, kBadAccessExit, R"(in train_batch \(batch 37\))",
                 "11train_batch"},
           Crash{"abort@37", SIGABRT, SIGABRT, R"(in train_batch \(batch 37\))", "11train_batch"},
           // Call 40 of the training set builds batch 8 of epoch 1, or one beside it when the
           // two worker threads entered get_batch in the other order.
           Crash{"loader@40", kBadAccessReported, kBadAccessExit,
                 R"(in the dataset's get_batch \(batch [789] of epoch 1\))", "9get_batch"},
       }) {
    const std::string run = runs.tmp / crash.spec;
    check_crash(crash, fit + " --output " + run, run);
    CHECK(latest(run) >= "batch-0000000032");
    finish_after_fault(runs.reference, run, "", 48);
  }

  // trainer validate reports a crash too, without advice: it writes no run.
  check_crash(
      {"evaluate@2", kBadAccessReported, kBadAccessExit,
       R"(in evaluate_batch \(validation batch 2\))", "14evaluate_batch"},
      kTrainer + " validate --checkpoint " + runs.reference + "/checkpoints/batch-0000000048", "");
  // So does trainer predict, in the trial's loader method and in predict_batch.
  const std::string predict = kTrainer + " predict --checkpoint " + runs.reference +
                              "/checkpoints/batch-0000000048 --output " + (runs.tmp / "p.pt");
  check_crash({"predict_loader@0", kBadAccessReported, kBadAccessExit,
               R"(in build_predict_data_loader)", "25build_predict_data_loader"},
              predict, "");
  check_crash({"predict@3", kBadAccessReported, kBadAccessExit, R"(in predict_batch \(batch 3\))",
               "13predict_batch"},
              predict, "");
  // So does any command whose trial library crashes while it loads.
  check_crash({"static@0", kBadAccessReported, kBadAccessExit,
               R"(in the static initialisers of trial library /.*/libcrucible_test_trials\.so)",
               "crash_while_loading"},
              kTrainer + " check " + runs.config, "");
}

TEST_CASE(
    "a crash on rank 1 of 2: the rank names itself and the place, the launcher names the "
    "signal, the run resumes whole",
    "[util][crash]") {
  ResumableRuns runs;
  const std::string fit = kTrainer + " fit " + runs.config + kShort + " --slots 2";
  const auto reference = run_command(fit + " --output " + runs.reference);
  INFO(reference.output);
  REQUIRE(reference.exit_code == 0);
  const std::string run = runs.tmp / "crashed";
  check_crash({"segv@37/1", kBadAccessReported, kBadAccessExit, R"(in train_batch \(batch 37\))",
               "11train_batch"},
              fit + " --output " + run, run, "rank 1: ");
  CHECK(latest(run) == "batch-0000000032");
  finish_after_fault(runs.reference, run, "", 48);
}
