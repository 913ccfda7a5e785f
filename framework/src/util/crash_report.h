#pragma once

#include <signal.h>

#include <array>
#include <cstdint>
#include <string>

namespace crucible::util {

// The signals of a crash: a bad memory access (SIGSEGV, SIGBUS), an arithmetic fault (SIGFPE), an
// illegal instruction (SIGILL), and abort() (SIGABRT: a failed assert, std::terminate).
inline constexpr std::array<int, 5> kCrashSignals = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};

// The signal that asks a process what it is doing (SIGUSR2): the launcher sends it to a rank that
// stopped responding, and a user may (kill -USR2 PID).
inline constexpr int kWhereSignal = SIGUSR2;

// While one lives, a crash of the process is reported before the process dies of it. The report
// goes to stderr: a line "error: WHO: crashed with SIGNAL (CAUSE) WHAT; ADVICE", where WHO is
// the owner's (a rank, or nothing), CAUSE the kind of fault and the address it touched, WHAT the
// innermost CrashScope of the crashing thread (such as "in train_batch (batch 37)"), and
// ADVICE the owner's; then the native stack of the crashing thread, one frame a line, innermost
// first (mangled names: c++filt demangles them). The line, as an ERROR line, and the stack are
// appended to the log file when one is set. Then the signal's previous disposition takes it: by
// default the process dies of it (exit status 128 + N, a core dump where enabled); a handler
// another library installed (a sanitizer's, UCX's) runs after the report. A signal sent to the
// process (kill, not abort) while its previous disposition was to ignore it stays ignored,
// unreported. A thread that crashes while another reports waits for that report to end (10 s at
// most). Strings given to it are kept for the life of the process.
// While one lives, kWhereSignal makes the main thread (the one whose thread id is the process id)
// report what it does and go on: "warning: WHO: asked what it is doing (by process PID): WHAT"
// (WHAT as above, or "outside the trial's methods"), then its native stack, on stderr and as a
// WARN line of the log file; nothing while a crash is being reported. Reports are formatted
// without allocating or locking; the stack comes from glibc's backtrace, which takes the dynamic
// loader's lock (a thread interrupted while loading a library could deadlock the answer to
// kWhereSignal, which a crash's end makes moot). A crash is reported on an alternate stack on
// the thread that constructed this object (a stack overflow there is reported too). One
// instance at a time: one made while another lives does nothing.
class CrashReports {
 public:
  explicit CrashReports(const std::string& who);
  ~CrashReports();
  CrashReports(const CrashReports&) = delete;
  CrashReports& operator=(const CrashReports&) = delete;

  // Reports are appended to the file at `path` from now on (opened when a crash comes; one that
  // cannot be opened then is left out: the report still goes to stderr).
  void set_log_file(const std::string& path);
  // The advice that ends the report line, such as how to continue the run.
  void set_advice(const std::string& advice);

 private:
  bool active_ = false;  // false while another instance lives
};

// Marks what the calling thread does, for the report of a crash in it, while it lives: `what`,
// a phrase such as "in train_batch", then "(UNIT INDEX)" when `unit` is given, such as "(batch
// 37)", or "(UNIT INDEX of epoch EPOCH)" when `epoch` is >= 0 too. Strings must outlive the scope.
// Scopes nest; the innermost is reported. Costs two thread-local stores.
class CrashScope {
 public:
  explicit CrashScope(const char* what, const char* unit = nullptr, int64_t index = 0,
                      int64_t epoch = -1);
  ~CrashScope();
  CrashScope(const CrashScope&) = delete;
  CrashScope& operator=(const CrashScope&) = delete;

  const char* what() const { return what_; }
  // The scope this one is nested in (nullptr for the outermost).
  const CrashScope* outer() const { return outer_; }
  const char* unit() const { return unit_; }
  int64_t index() const { return index_; }
  int64_t epoch() const { return epoch_; }

 private:
  const char* what_;
  const char* unit_;
  int64_t index_;
  int64_t epoch_;
  const CrashScope* outer_;
};

}  // namespace crucible::util
