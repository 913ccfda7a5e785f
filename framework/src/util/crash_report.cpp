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

// What the installed handler reads. Strings are replaced by publishing a new one; the old ones
// live until the CrashReports that set them ends.
std::atomic<bool> g_installed{false};
std::atomic<const std::string*> g_who{nullptr};
std::atomic<const std::string*> g_advice{nullptr};
std::atomic<int> g_log_fd{-1};
std::atomic<pid_t> g_reporting_thread{0};
std::atomic<bool> g_reported{false};
std::array<struct sigaction, kCrashSignals.size()> g_previous{};
bool g_own_alt_stack = false;

// Kept for the handler while a CrashReports lives: every string it published (a crashing thread
// may still read a replaced one), and the alternate stack.
struct Owned {
  std::vector<std::unique_ptr<const std::string>> strings;
  std::unique_ptr<char[]> alt_stack;
};
Owned* g_owned = nullptr;

// A line built without allocating, truncated at its capacity.
class Text {
 public:
  Text& add(const char* s) {
    while (s != nullptr && *s != '\0' && size_ < sizeof(buf_)) buf_[size_++] = *s++;
    return *this;
  }
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
  if (info->si_code == SI_USER) {
    text.add("sent by process ").add_int(info->si_pid);
    return;
  }
  switch (sig) {
    case SIGSEGV:
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

// The report line without its "error: " or time stamp.
void add_report_line(Text& text, int sig, const siginfo_t* info) {
  const std::string* who = g_who.load();
  if (who != nullptr && !who->empty()) text.add(who->c_str()).add(": ");
  text.add("crashed with ").add(signal_name(sig)).add(" (");
  add_cause(text, sig, info);
  text.add(")");
  if (const CrashScope* scope = t_scope) {
    text.add(" ").add(scope->what());
    if (scope->unit() != nullptr) {
      text.add(" (");
      if (scope->epoch() >= 0) text.add("epoch ").add_int(scope->epoch()).add(", ");
      text.add(scope->unit()).add(" ").add_int(scope->index()).add(")");
    }
  }
  const std::string* advice = g_advice.load();
  if (advice != nullptr && !advice->empty()) text.add("; ").add(advice->c_str());
  text.add("\n");
}

void report(int sig, const siginfo_t* info, void* const* frames, int depth) {
  Text line;
  add_report_line(line, sig, info);
  Text console;
  console.add("error: ").add(line.data());
  write_all(STDERR_FILENO, console.data(), console.size());
  const char header[] = "native stack of the crashing thread, innermost frame first:\n";
  write_all(STDERR_FILENO, header, sizeof(header) - 1);
  backtrace_symbols_fd(frames, depth, STDERR_FILENO);
  const int log = g_log_fd.load();
  if (log < 0) return;
  Text logged;
  add_utc_stamp(logged);
  logged.add(" ERROR ").add(line.data());
  write_all(log, logged.data(), logged.size());
  write_all(log, header, sizeof(header) - 1);
  backtrace_symbols_fd(frames, depth, log);
}

int index_of(int sig) {
  for (size_t i = 0; i < kCrashSignals.size(); ++i) {
    if (kCrashSignals[i] == sig) return static_cast<int>(i);
  }
  return -1;
}

void on_crash(int sig, siginfo_t* info, void*) {
  const int saved_errno = errno;
  void* frames[64];
  const int depth = backtrace(frames, 64);
  // frames[0] is this handler and frames[1] the kernel's signal return; the crash is below them.
  const int skip = depth > 2 ? 2 : 0;
  const pid_t self = static_cast<pid_t>(::syscall(SYS_gettid));
  pid_t none = 0;
  if (g_reporting_thread.compare_exchange_strong(none, self)) {
    report(sig, info, frames + skip, depth - skip);
    g_reported.store(true);
  } else if (none != self) {
    // Another thread reports: the process must not end before that report does (10 s at most).
    for (int i = 0; i < 1000 && !g_reported.load(); ++i) {
      const struct timespec wait = {0, 10 * 1000 * 1000};
      ::nanosleep(&wait, nullptr);
    }
  }
  // The previous disposition takes the signal: a fault recurs when this handler returns; a signal
  // that was sent (kill, raise, abort) is raised again and delivered on return.
  const int i = index_of(sig);
  if (i >= 0) ::sigaction(sig, &g_previous[static_cast<size_t>(i)], nullptr);
  if (info == nullptr || info->si_code <= 0) ::raise(sig);
  errno = saved_errno;
}

// Publishes `value` in `slot`; the string lives until the CrashReports ends.
void publish(std::atomic<const std::string*>& slot, const std::string& value) {
  g_owned->strings.push_back(std::make_unique<const std::string>(value));
  slot.store(g_owned->strings.back().get());
}

}  // namespace

CrashReports::CrashReports(const std::string& who) {
  if (g_installed.exchange(true)) return;  // another instance lives: this one does nothing
  active_ = true;
  g_owned = new Owned();
  g_reporting_thread = 0;
  g_reported = false;
  publish(g_who, who);
  // The first backtrace loads the unwinder; a handler must not be the one to load it.
  void* warm[1];
  backtrace(warm, 1);

  stack_t current{};
  if (::sigaltstack(nullptr, &current) == 0 && (current.ss_flags & SS_DISABLE) != 0) {
    const size_t size = 64 * 1024 + SIGSTKSZ;
    g_owned->alt_stack = std::make_unique<char[]>(size);
    stack_t alt{};
    alt.ss_sp = g_owned->alt_stack.get();
    alt.ss_size = size;
    g_own_alt_stack = ::sigaltstack(&alt, nullptr) == 0;
  }
  struct sigaction action {};
  action.sa_sigaction = on_crash;
  action.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&action.sa_mask);
  for (size_t i = 0; i < kCrashSignals.size(); ++i) {
    ::sigaction(kCrashSignals[i], &action, &g_previous[i]);
  }
}

CrashReports::~CrashReports() {
  if (!active_) return;
  for (size_t i = 0; i < kCrashSignals.size(); ++i) {
    struct sigaction current {};
    // A handler installed after ours stays.
    if (::sigaction(kCrashSignals[i], nullptr, &current) == 0 &&
        (current.sa_flags & SA_SIGINFO) != 0 && current.sa_sigaction == on_crash) {
      ::sigaction(kCrashSignals[i], &g_previous[i], nullptr);
    }
  }
  if (g_own_alt_stack) {
    stack_t off{};
    off.ss_flags = SS_DISABLE;
    ::sigaltstack(&off, nullptr);
    g_own_alt_stack = false;
  }
  g_who = nullptr;
  g_advice = nullptr;
  const int log = g_log_fd.exchange(-1);
  if (log >= 0) ::close(log);
  delete g_owned;
  g_owned = nullptr;
  g_installed = false;
}

void CrashReports::set_log_file(const std::string& path) {
  if (!active_) return;
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  const int old = g_log_fd.exchange(fd);
  if (old >= 0) ::close(old);
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
