#include "util/crash_report.h"

#include <errno.h>
#include <execinfo.h>
#include <fcntl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

namespace crucible::util {
namespace {

// The innermost CrashScope of this thread. Initial-exec: reading it in a signal handler never
// allocates.
__attribute__((tls_model("initial-exec"))) thread_local const CrashScope* t_scope = nullptr;

// What the installed handlers read. A string is replaced by publishing a new one (publish).
std::atomic<bool> g_installed{false};
std::atomic<const std::string*> g_who{nullptr};
std::atomic<const std::string*> g_advice{nullptr};
std::atomic<const std::string*> g_log_path{nullptr};
std::atomic<pid_t> g_reporting_thread{0};
std::atomic<bool> g_reported{false};
std::array<struct sigaction, kCrashSignals.size()> g_previous{};
struct sigaction g_previous_where {};
std::atomic<pid_t> g_asker{0};  // who sent kWhereSignal to a thread that passed it on

// Every string published for the handler, kept for the life of the process: a thread that
// crashed may still read one after it was replaced or its CrashReports ended. A few per fit.
std::vector<std::unique_ptr<const std::string>>* g_strings = nullptr;
// The alternate stack a CrashReports set, and the thread it set it on.
std::unique_ptr<char[]> g_alt_stack;
pid_t g_alt_stack_thread = 0;

pid_t this_thread() { return static_cast<pid_t>(::syscall(SYS_gettid)); }

// A line built without allocating, truncated at its capacity.
class Text {
 public:
  Text& add(const char* s) {
    while (s != nullptr && *s != '\0' && size_ < sizeof(buf_)) buf_[size_++] = *s++;
    return *this;
  }
  // Empties it.
  void clear() { size_ = 0; }
  Text& add_int(int64_t v) {
    char digits[24];
    int n = 0;
    uint64_t u = v < 0 ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
    do {
      digits[n++] = static_cast<char>('0' + u % 10);
      u /= 10;
    } while (u != 0);
    if (v < 0) add("-");
    while (n > 0 && size_ < sizeof(buf_)) buf_[size_++] = digits[--n];
    return *this;
  }
  Text& add_int_2(int64_t v) {  // two digits at least
    if (v < 10) add("0");
    return add_int(v);
  }
  Text& add_hex(uintptr_t v) {
    add("0x");
    char digits[2 * sizeof(v)];
    int n = 0;
    do {
      digits[n++] = "0123456789abcdef"[v % 16];
      v /= 16;
    } while (v != 0);
    while (n > 0 && size_ < sizeof(buf_)) buf_[size_++] = digits[--n];
    return *this;
  }
  const char* data() const { return buf_; }
  size_t size() const { return size_; }

 private:
  char buf_[4096];
  size_t size_ = 0;
};

void write_all(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    data += n;
    size -= static_cast<size_t>(n);
  }
}

// The time now as the log's stamps have it, "2026-11-26T09:30:22Z" (UTC), computed without the
// C library's time zone code.
void add_utc_stamp(Text& text) {
  struct timespec now {};
  ::clock_gettime(CLOCK_REALTIME, &now);
  const int64_t secs = now.tv_sec;
  int64_t days = secs / 86400;
  const int64_t rest = secs % 86400;
  // Civil date from days since 1970-01-01 (the proleptic Gregorian calendar, in 400-year eras).
  days += 719468;
  const int64_t era = days / 146097;
  const int64_t doe = days - era * 146097;
  const int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  const int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  const int64_t mp = (5 * doy + 2) / 153;
  const int64_t day = doy - (153 * mp + 2) / 5 + 1;
  const int64_t month = mp < 10 ? mp + 3 : mp - 9;
  const int64_t year = yoe + era * 400 + (month <= 2 ? 1 : 0);
  text.add_int(year).add("-").add_int_2(month).add("-").add_int_2(day).add("T");
  text.add_int_2(rest / 3600).add(":").add_int_2(rest / 60 % 60).add(":").add_int_2(rest % 60);
  text.add("Z");
}

const char* signal_name(int sig) {
  switch (sig) {
    case SIGSEGV:
      return "SIGSEGV";
    case SIGBUS:
      return "SIGBUS";
    case SIGFPE:
      return "SIGFPE";
    case SIGILL:
      return "SIGILL";
    case SIGABRT:
      return "SIGABRT";
  }
  return "a signal";
}

// What caused `sig`, as `info` tells it.
void add_cause(Text& text, int sig, const siginfo_t* info) {
  const uintptr_t address = reinterpret_cast<uintptr_t>(info->si_addr);
  if (sig != SIGABRT && info->si_code <= 0) {  // kill, sigqueue, raise, pthread_kill
    text.add("sent by process ").add_int(info->si_pid);
    return;
  }
  switch (sig) {
    case SIGSEGV:
      if (info->si_code == SI_KERNEL) {  // a general protection fault: no address is known
        text.add("a memory access the processor refused, such as through a corrupt pointer");
        return;
      }
      text.add("a memory access at ").add_hex(address);
      text.add(info->si_code == SEGV_ACCERR ? ", which it may not make" : ", which is not mapped");
      return;
    case SIGBUS:
      text.add("a memory access at ").add_hex(address).add(" the hardware cannot make");
      return;
    case SIGFPE:
      text.add(info->si_code == FPE_INTDIV   ? "an integer division by zero"
               : info->si_code == FPE_INTOVF ? "an integer overflow"
                                             : "an arithmetic fault");
      return;
    case SIGILL:
      text.add("an illegal instruction at ").add_hex(address);
      return;
    case SIGABRT:
      text.add("abort() was called: a failed assert, std::terminate, or the code itself");
      return;
  }
}

void add_scope(Text& text, const char* outside = nullptr, const CrashScope* scope = t_scope);

// "WHO: ", or nothing when the owner gave no name.
void add_who(Text& text) {
  const std::string* who = g_who.load();
  if (who != nullptr && !who->empty()) text.add(who->c_str()).add(": ");
}

// The report line without its "error: " or time stamp.
void add_report_line(Text& text, int sig, const siginfo_t* info) {
  add_who(text);
  text.add("crashed with ").add(signal_name(sig)).add(" (");
  add_cause(text, sig, info);
  text.add(")");
  add_scope(text);
  const std::string* advice = g_advice.load();
  if (advice != nullptr && !advice->empty()) text.add("; ").add(advice->c_str());
  text.add("\n");
}

// " WHAT (UNIT INDEX)" of this thread's innermost CrashScope, or `outside` when it has none.
void add_scope(Text& text, const char* outside, const CrashScope* scope) {
  if (scope != nullptr) {
    text.add(" ").add(scope->what());
    if (scope->unit() != nullptr) {
      text.add(" (").add(scope->unit()).add(" ").add_int(scope->index());
      if (scope->epoch() >= 0) text.add(" of epoch ").add_int(scope->epoch());
      text.add(")");
    }
  } else if (outside != nullptr) {
    text.add(" ").add(outside);
  }
}

// Writes a report to stderr (after `console_prefix`) and to the log file (stamped, as a `level`
// line): the line add_line(text) makes, ending in '\n', then `header` and the stack `frames`.
// One buffer: the alternate stack another library set up may be small.
template <class AddLine>
void write_report(const char* console_prefix, const char* level, const AddLine& add_line,
                  const char* header, void* const* frames, int depth) {
  Text text;
  text.add(console_prefix);
  add_line(text);
  text.add(header);
  write_all(STDERR_FILENO, text.data(), text.size());
  // backtrace_symbols_fd looks symbols up under the dynamic loader's lock; a thread that crashed
  // holding it makes this wait, which the other thread's 10 s bound ends.
  backtrace_symbols_fd(frames, depth, STDERR_FILENO);
  // Opened only now (open is async-signal-safe): a fit makes no file-system call for reports.
  const std::string* path = g_log_path.load();
  if (path == nullptr || path->empty()) return;
  const int log = ::open(path->c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  if (log < 0) return;
  text.clear();
  add_utc_stamp(text);
  text.add(" ").add(level).add(" ");
  add_line(text);
  text.add(header);
  write_all(log, text.data(), text.size());
  backtrace_symbols_fd(frames, depth, log);
  ::close(log);
}

const char kCrashHeader[] = "native stack of the crashing thread, innermost frame first:\n";

int index_of(int sig) {
  for (size_t i = 0; i < kCrashSignals.size(); ++i) {
    if (kCrashSignals[i] == sig) return static_cast<int>(i);
  }
  return -1;
}

// Whether `info` is a fault of the instruction that raised `sig`, which recurs when the handler
// returns; anything else was sent (kill, raise, abort) or is asynchronous (a machine check that
// needs no action).
bool recurs(int sig, const siginfo_t* info) {
  if (info == nullptr || info->si_code <= 0) return false;
  if (sig == SIGABRT) return false;
  return !(sig == SIGBUS && info->si_code == BUS_MCEERR_AO);
}

void on_crash(int sig, siginfo_t* info, void*) {
  const int saved_errno = errno;
  const int i = index_of(sig);
  const struct sigaction* previous = i >= 0 ? &g_previous[static_cast<size_t>(i)] : nullptr;
  const bool fault = recurs(sig, info);
  // A sent signal that was ignored before stays ignored.
  if (!fault && previous != nullptr && (previous->sa_flags & SA_SIGINFO) == 0 &&
      previous->sa_handler == SIG_IGN) {
    errno = saved_errno;
    return;
  }
  void* frames[64];
  const int depth = backtrace(frames, 64);
  // frames[0] is this handler and frames[1] the kernel's signal return; the crash is below them.
  const int skip = depth > 2 ? 2 : 0;
  const pid_t self = this_thread();
  pid_t none = 0;
  bool again = false;  // this thread crashed again, while reporting or in a handler after ours
  if (g_reporting_thread.compare_exchange_strong(none, self)) {
    write_report(
        "error: ", "ERROR", [&](Text& text) { add_report_line(text, sig, info); }, kCrashHeader,
        frames + skip, depth - skip);
    g_reported.store(true);
  } else if (none != self) {
    // Another thread reports: the process must not end before that report does (10 s at most).
    for (int n = 0; n < 1000 && !g_reported.load(); ++n) {
      const struct timespec wait = {0, 10 * 1000 * 1000};
      ::nanosleep(&wait, nullptr);
    }
  } else {
    again = true;
  }
  // The previous disposition takes the signal (the default one when this thread came back here:
  // a handler after ours may chain to this one): a fault recurs when this handler returns; a
  // signal that was sent is raised again and delivered on return.
  struct sigaction fallback {};
  fallback.sa_handler = SIG_DFL;
  sigemptyset(&fallback.sa_mask);
  ::sigaction(sig, again || previous == nullptr ? &fallback : previous, nullptr);
  if (!fault) ::raise(sig);
  errno = saved_errno;
}

// kWhereSignal: on the main thread, reports what it does and its stack, and returns; on another,
// passes the signal to the main thread.
void on_where(int sig, siginfo_t* info, void*) {
  const int saved_errno = errno;
  const pid_t process = ::getpid();
  const bool sent = info != nullptr && info->si_code == SI_USER;
  if (this_thread() != process) {
    g_asker.store(sent ? info->si_pid : 0);
    ::syscall(SYS_tgkill, process, process, sig);
    errno = saved_errno;
    return;
  }
  // A crash report in progress on another thread has the console; the process is ending.
  if (g_reporting_thread.load() != 0) {
    errno = saved_errno;
    return;
  }
  const bool passed_on = info != nullptr && info->si_code == SI_TKILL && info->si_pid == process;
  const pid_t asker = sent ? info->si_pid : passed_on ? g_asker.exchange(0) : 0;
  const CrashScope answering("while answering SIGUSR2");
  void* frames[64];
  const int depth = backtrace(frames, 64);
  const int skip = depth > 2 ? 2 : 0;
  write_report(
      "warning: ", "WARN",
      [&](Text& text) {
        add_who(text);
        text.add("asked what it is doing");
        if (asker != 0) text.add(" (by process ").add_int(asker).add(")");
        text.add(":");
        add_scope(text, "outside the trial's methods", answering.outer());
        text.add("\n");
      },
      "native stack of the main thread, innermost frame first:\n", frames + skip, depth - skip);
  errno = saved_errno;
}

// Puts `previous` back as the disposition of `sig` while `handler` (ours) is the current one: a
// handler installed after ours stays.
void restore_if_ours(int sig, void (*handler)(int, siginfo_t*, void*),
                     const struct sigaction& previous) {
  struct sigaction current {};
  if (::sigaction(sig, nullptr, &current) == 0 && (current.sa_flags & SA_SIGINFO) != 0 &&
      current.sa_sigaction == handler) {
    ::sigaction(sig, &previous, nullptr);
  }
}

// Publishes `value` in `slot`; the string lives as long as the process.
void publish(std::atomic<const std::string*>& slot, const std::string& value) {
  if (g_strings == nullptr) g_strings = new std::vector<std::unique_ptr<const std::string>>();
  g_strings->push_back(std::make_unique<const std::string>(value));
  slot.store(g_strings->back().get());
}

}  // namespace

CrashReports::CrashReports(const std::string& who) {
  if (g_installed.exchange(true)) return;  // another instance lives: this one does nothing
  active_ = true;
  g_reporting_thread = 0;
  g_reported = false;
  publish(g_who, who);
  // The first backtrace loads the unwinder; a handler must not be the one to load it.
  void* warm[1];
  backtrace(warm, 1);

  stack_t current{};
  if (::sigaltstack(nullptr, &current) == 0 && (current.ss_flags & SS_DISABLE) != 0) {
    const size_t size = 64 * 1024 + SIGSTKSZ;
    auto stack = std::make_unique<char[]>(size);
    stack_t alt{};
    alt.ss_sp = stack.get();
    alt.ss_size = size;
    if (::sigaltstack(&alt, nullptr) == 0) {
      g_alt_stack = std::move(stack);
      g_alt_stack_thread = this_thread();
    }
  }
  struct sigaction action {};
  action.sa_sigaction = on_crash;
  action.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&action.sa_mask);
  for (size_t i = 0; i < kCrashSignals.size(); ++i) {
    ::sigaction(kCrashSignals[i], &action, &g_previous[i]);
  }
  struct sigaction where {};
  where.sa_sigaction = on_where;
  where.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&where.sa_mask);
  ::sigaction(kWhereSignal, &where, &g_previous_where);
}

CrashReports::~CrashReports() {
  if (!active_) return;
  for (size_t i = 0; i < kCrashSignals.size(); ++i) {
    restore_if_ours(kCrashSignals[i], on_crash, g_previous[i]);
  }
  restore_if_ours(kWhereSignal, on_where, g_previous_where);
  // On another thread the alternate stack is still the constructing thread's: it is left to it.
  if (g_alt_stack) {
    stack_t off{};
    off.ss_flags = SS_DISABLE;
    if (g_alt_stack_thread == this_thread() && ::sigaltstack(&off, nullptr) == 0) {
      g_alt_stack.reset();
    } else {
      (void)g_alt_stack.release();
    }
    g_alt_stack_thread = 0;
  }
  g_who = nullptr;
  g_advice = nullptr;
  g_log_path = nullptr;
  g_installed = false;
}

void CrashReports::set_log_file(const std::string& path) {
  if (!active_) return;
  publish(g_log_path, path);
}

void CrashReports::set_advice(const std::string& advice) {
  if (!active_) return;
  publish(g_advice, advice);
}

CrashScope::CrashScope(const char* what, const char* unit, int64_t index, int64_t epoch)
    : what_(what), unit_(unit), index_(index), epoch_(epoch), outer_(t_scope) {
  t_scope = this;
}

CrashScope::~CrashScope() { t_scope = outer_; }

}  // namespace crucible::util
