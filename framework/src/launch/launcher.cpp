#include "launch/launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <deque>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <crucible/errors.h>

#include "distributed/c10d_compat.h"
#include "distributed/store_port.h"
#include "launch/process.h"
#include "util/broken_pipes.h"
#include "util/cpus.h"
#include "util/crash_report.h"
#include "util/error_text.h"
#include "util/stop_handlers.h"

namespace crucible::launch {

namespace {

using Clock = std::chrono::steady_clock;

// One worker: its process and the read ends of its stdout and stderr.
struct Worker {
  int64_t rank = 0;
  pid_t pid = -1;
  std::array<int, 2> fds = {-1, -1};   // stdout, stderr
  std::array<std::string, 2> partial;  // an unfinished line of each
  std::deque<std::string> tail;
  bool reaped = false;
  int status = 0;
};

// Starts one worker with its stdout and stderr on new pipes.
void spawn_worker(Worker& w, const std::vector<std::string>& command,
                  std::vector<std::string> env) {
  std::array<std::array<int, 2>, 2> pipes{};
  for (auto& p : pipes) {
    if (::pipe2(p.data(), O_CLOEXEC) != 0) {
      throw Error(fmt::format("launcher: cannot create a pipe for rank {}: {}", w.rank,
                              std::strerror(errno)));
    }
  }
  w.pid = spawn(command, std::move(env), pipes[0][1], pipes[1][1],
                fmt::format("rank {}'s worker command", w.rank));
  for (size_t i = 0; i < 2; ++i) {
    ::close(pipes[i][1]);
    w.fds[i] = pipes[i][0];
  }
}

class Supervisor {
 public:
  Supervisor(const LaunchOptions& options, std::ostream& out, std::ostream& err)
      : options_(options), out_(out), err_(err) {}

  LaunchResult run(int port) {
    const int64_t world = options_.slots() * options_.nnodes();
    workers_.resize(static_cast<size_t>(options_.slots()));
    for (int64_t i = 0; i < options_.slots(); ++i) {
      Worker& w = workers_[static_cast<size_t>(i)];
      w.rank = options_.node_rank() * options_.slots() + i;
      std::map<std::string, std::string> vars = {
          {"RANK", std::to_string(w.rank)},
          {"WORLD_SIZE", std::to_string(world)},
          {"LOCAL_RANK", std::to_string(i)},
          {"LOCAL_WORLD_SIZE", std::to_string(options_.slots())},
          {"GROUP_RANK", std::to_string(options_.node_rank())},
          {"GROUP_WORLD_SIZE", std::to_string(options_.nnodes())},
          {"MASTER_ADDR", options_.master_addr()},
          {"MASTER_PORT", std::to_string(port)},
          {"CRUCIBLE_STORE_HOSTED", "1"}};
      if (!std::getenv("OMP_NUM_THREADS")) {
        const auto cores = static_cast<int64_t>(util::allowed_cpus().size());
        vars["OMP_NUM_THREADS"] = std::to_string(std::max<int64_t>(1, cores / options_.slots()));
      }
      spawn_worker(w, options_.command(), environment_with(vars));
    }
    while (!all_finished()) {
      if (const int sig = SignalCatcher::take()) {
        interrupts_ += sig == SIGINT ? 1 : 0;
        passed_on_.insert(sig);
        signal_running(sig);
        if (sig == SIGINT && interrupts_ == 1) util::notice_interrupt_on_terminal();
      }
      if (SignalCatcher::take_question()) signal_running(util::kWhereSignal);
      pump(10);
      reap();
      if (term_at_ && Clock::now() >= *term_at_) {
        signal_running(SIGTERM);
        term_at_.reset();
        kill_at_ = Clock::now() + options_.grace();
      }
      if (kill_at_ && Clock::now() >= *kill_at_) {
        signal_running(SIGKILL);
        kill_at_.reset();
      }
    }
    return result();
  }

 private:
  // Whether every worker was reaped and its output read to its end. A process a worker started
  // and left running keeps the worker's pipes open: its output is read for kDrainTime more at
  // most, then the pipes are closed (its last unfinished line written out), so that the launcher
  // ends with its workers.
  bool all_finished() {
    bool open = false;
    for (const auto& w : workers_) {
      if (!w.reaped) return false;
      open = open || w.fds[0] >= 0 || w.fds[1] >= 0;
    }
    if (!open) return true;
    if (!all_reaped_at_) all_reaped_at_ = Clock::now();
    if (Clock::now() - *all_reaped_at_ < kDrainTime) return false;
    for (auto& w : workers_) {
      for (size_t s = 0; s < 2; ++s) {
        if (w.fds[s] >= 0) close_stream(w, s);
      }
    }
    return true;
  }

  // Writes out the unfinished last line of `w`'s stream `s` and closes its pipe.
  void close_stream(Worker& w, size_t s) {
    if (!w.partial[s].empty()) emit(w, s, w.partial[s]);
    w.partial[s].clear();
    ::close(w.fds[s]);
    w.fds[s] = -1;
  }

  void signal_running(int sig) {
    for (const auto& w : workers_) {
      if (!w.reaped) ::kill(w.pid, sig);
    }
  }

  // Reads what the workers wrote, for at most `timeout_ms`, and writes out whole lines. Watches
  // the launcher's own console too (where it is this process's stdout and stderr), asking poll
  // for no event: a pipe or socket whose reader went away is found at once, not when the next
  // relayed line fails.
  void pump(int timeout_ms) {
    std::vector<pollfd> fds;
    std::vector<std::pair<size_t, size_t>> owner;  // (worker or kConsole, stream)
    for (size_t i = 0; i < workers_.size(); ++i) {
      for (size_t s = 0; s < 2; ++s) {
        if (workers_[i].fds[s] >= 0) {
          fds.push_back({workers_[i].fds[s], POLLIN, 0});
          owner.emplace_back(i, s);
        }
      }
    }
    for (size_t s = 0; s < 2; ++s) {
      const int fd = console_fd(s);
      if (fd >= 0 && !closed_[s] && watch_console_[s]) {
        fds.push_back({fd, 0, 0});
        owner.emplace_back(kConsole, s);
      }
    }
    if (::poll(fds.data(), fds.size(), timeout_ms) <= 0) return;
    char buf[65536];
    for (size_t k = 0; k < fds.size(); ++k) {
      if (owner[k].first == kConsole) {
        if (fds[k].revents == 0) continue;
        if (util::reader_gone(fds[k].fd, fds[k].revents)) {
          console_closed(owner[k].second);
        } else {
          watch_console_[owner[k].second] = false;  // a terminal's hang-up: SIGHUP's business
        }
        continue;
      }
      if (!(fds[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      auto [i, s] = owner[k];
      Worker& w = workers_[i];
      if (w.fds[s] < 0) continue;  // closed by console_closed in this pass
      const ssize_t n = ::read(w.fds[s], buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        close_stream(w, s);
        continue;
      }
      w.partial[s].append(buf, static_cast<size_t>(n));
      size_t start = 0;
      for (size_t nl; (nl = w.partial[s].find('\n', start)) != std::string::npos; start = nl + 1) {
        emit(w, s, w.partial[s].substr(start, nl - start));
      }
      w.partial[s].erase(0, start);
    }
  }

  void emit(Worker& w, size_t stream, const std::string& line) {
    std::ostream& to = stream == 0 ? out_ : err_;
    if (!closed_[stream]) {
      to.clear();  // a write error other than a closed reader loses its line only
      errno = 0;
      if (stream == 1 || !(options_.plain_rank0_stdout() && w.rank == 0)) {
        to << "[rank " << w.rank << "] ";
      }
      to << line << std::endl;
      if (!to && errno == EPIPE) console_closed(stream);
    }
    w.tail.push_back(line);
    while (w.tail.size() > options_.tail_lines()) w.tail.pop_front();
  }

  // Reaps exited workers. After the first failure the others get a moment to fail on their
  // own; then the one to blame is chosen (a worker that did not fail for want of its peers, if
  // any) and the rest are stopped.
  void reap() {
    bool running = false;
    for (auto& w : workers_) {
      if (w.reaped) continue;
      int status = 0;
      if (::waitpid(w.pid, &status, WNOHANG) != w.pid) {
        running = true;
        continue;
      }
      w.reaped = true;
      w.status = status;
      const int code = exit_code_of(status);
      if (code != kExitOk && code != kExitStopped && !ended_by_passed_on(w)) {
        failures_.push_back(&w);
        if (!first_failure_at_) first_failure_at_ = Clock::now();
      }
    }
    if (failures_.empty() || failed_) return;
    if (running && Clock::now() - *first_failure_at_ < kBlameWindow) return;
    failed_ = failures_.front();
    for (const Worker* w : failures_) {
      if (!gave_up_on_peers(*w)) {
        failed_ = w;
        break;
      }
    }
    // Every failure so far was a rank giving up on its peers: the ones still running are the
    // ones that stopped responding (unless a stop signal passed on ended the peers it lost).
    // Each is asked what it is doing first: its answer (where it is stuck, its stack) comes out
    // with its other lines.
    const bool user_stop = std::any_of(workers_.begin(), workers_.end(),
                                       [&](const Worker& w) { return ended_by_passed_on(w); });
    if (gave_up_on_peers(*failed_) && !user_stop) {
      for (const auto& w : workers_) {
        if (w.reaped) continue;
        unresponsive_.push_back(w.rank);
        ::kill(w.pid, util::kWhereSignal);
      }
    }
    // The ranks asked get a moment to answer: a SIGTERM that a rank does not handle (validate,
    // predict) would end it before it could.
    term_at_ = Clock::now() + (unresponsive_.empty() ? Clock::duration::zero() : kAnswerTime);
  }

  // This process's file descriptor behind console stream `stream` (0 stdout, 1 stderr), or -1
  // when the launcher writes to another stream (a test's).
  int console_fd(size_t stream) const {
    if (stream == 0) return &out_ == &std::cout ? STDOUT_FILENO : -1;
    return &err_ == &std::cerr ? STDERR_FILENO : -1;
  }

  // The reader of `stream` (0 stdout, 1 stderr) went away: says so on the other stream when it
  // is still open, the first time, and closes the workers' pipes of that stream, so that each
  // rank finds its console closed as a run of its own does: a rank that trains stops at its next
  // batch with a checkpoint (every rank at the same batch), and one that writes no more lines
  // there (a finished fit, a validation) ends as it would have.
  void console_closed(size_t stream) {
    if (closed_[stream]) return;
    closed_[stream] = true;
    if (!closed_[1 - stream]) {
      (stream == 0 ? err_ : out_) << "the launcher's "
                                  << (stream == 0 ? "standard output" : "standard error")
                                  << " was closed: the ranks' is closed too, so that they stop as "
                                     "on SIGTERM, with a checkpoint"
                                  << std::endl;
    }
    for (auto& w : workers_) {
      if (w.fds[stream] < 0) continue;
      ::close(w.fds[stream]);
      w.fds[stream] = -1;
    }
  }

  static constexpr std::chrono::milliseconds kBlameWindow{1000};
  // How long a rank asked what it is doing has to answer before it is stopped.
  static constexpr std::chrono::milliseconds kAnswerTime{1000};
  // How long output is read after the last worker was reaped, from processes it left running.
  static constexpr std::chrono::milliseconds kDrainTime{2000};

  // Whether a stop signal that this launcher passed on ended the worker (it came before the rank
  // handles it, while it started).
  bool ended_by_passed_on(const Worker& w) const {
    return WIFSIGNALED(w.status) && passed_on_.count(WTERMSIG(w.status)) > 0;
  }

  // "signal 15 (Terminated), passed on to the ranks, ended rank 1 before it handled it"; "" when
  // it ended none. Sets `sig` to the signal.
  std::string passed_on_endings(int& sig) const {
    std::vector<int64_t> ranks;
    for (const auto& w : workers_) {
      if (!w.reaped || !ended_by_passed_on(w)) continue;
      ranks.push_back(w.rank);
      sig = WTERMSIG(w.status);
    }
    if (ranks.empty()) return "";
    const bool one = ranks.size() == 1;
    return fmt::format(
        "signal {} ({}), passed on to the ranks, ended rank{} {} before {} handled it", sig,
        strsignal(sig), one ? "" : "s", fmt::join(ranks, ", "), one ? "it" : "they");
  }

  // Whether the worker gave up on its peers (PeerLostError) rather than failing on its own.
  static bool gave_up_on_peers(const Worker& w) { return exit_code_of(w.status) == kExitPeerLost; }

  LaunchResult result() const {
    LaunchResult r;
    if (failed_) {
      r.exit_code = exit_code_of(failed_->status);
      std::string tail;
      for (const auto& line : failed_->tail) tail += "\n  " + line;
      if (r.exit_code == kExitInterrupted && interrupts_ >= 2) {
        // The user's own stop, not a rank's failure: each rank said so on its lines.
        r.failure = "interrupted twice: every rank stopped at once, without a checkpoint";
        return r;
      }
      // Every rank of this node that failed gave up on its peers, and none was left running:
      // the cause is on another node, whose launcher names it.
      const bool elsewhere =
          gave_up_on_peers(*failed_) && unresponsive_.empty() && options_.nnodes() > 1;
      r.failure = fmt::format(
          "rank {} {}{}{}. Rank {}'s last lines:{}", failed_->rank, describe(failed_->status),
          elsewhere ? " (it lost its peers: the failure is on another node, whose launcher "
                      "names it)"
                    : "",
          workers_.size() > 1 ? "; the other ranks were stopped" : "", failed_->rank,
          tail.empty() ? "\n  (none)" : tail);
      int sig = 0;
      const std::string ended = passed_on_endings(sig);
      if (!ended.empty() && gave_up_on_peers(*failed_)) {
        // The user's stop: the ranks that failed only lost the peers it ended.
        r.exit_code = 128 + sig;
        r.failure = ended + "; the others lost their peers and were stopped";
        return r;
      }
      if (!unresponsive_.empty()) {
        r.failure = fmt::format(
                        "rank {} stopped responding (still running when the others gave "
                        "up waiting for it; stopped): ",
                        fmt::join(unresponsive_, ", ")) +
                    r.failure;
      }
      return r;
    }
    for (const auto& w : workers_) {
      if (exit_code_of(w.status) == kExitStopped) r.exit_code = kExitStopped;
    }
    int sig = 0;
    r.failure = passed_on_endings(sig);
    if (sig != 0) r.exit_code = 128 + sig;
    return r;
  }

  const LaunchOptions& options_;
  std::ostream& out_;
  std::ostream& err_;
  std::vector<Worker> workers_;
  std::vector<const Worker*> failures_;                        // in the order they were reaped
  static constexpr size_t kConsole = static_cast<size_t>(-1);  // owner of a console entry
  std::array<bool, 2> closed_{};  // out_, err_: a write failed with EPIPE, or poll found it so
  std::array<bool, 2> watch_console_{true, true};  // false once poll reported something else
  std::optional<Clock::time_point> first_failure_at_;
  const Worker* failed_ = nullptr;
  std::vector<int64_t> unresponsive_;         // ranks running when only peer-wait failures had come
  int interrupts_ = 0;                        // SIGINTs passed on to the ranks
  std::set<int> passed_on_;                   // the signals passed on to the ranks
  std::optional<Clock::time_point> term_at_;  // when to stop the ranks still running
  std::optional<Clock::time_point> kill_at_;
  std::optional<Clock::time_point> all_reaped_at_;  // when the last worker was reaped
};

}  // namespace

c10::intrusive_ptr<c10d::TCPStore> serve_store(const std::string& host, int port) {
  util::survive_broken_pipes();
  try {
    dist::check_store_port(port);
    c10d::TCPStoreOptions options;
    options.port = static_cast<std::uint16_t>(port);
    options.isServer = true;
    options.waitWorkers = false;
    return dist::open_tcp_store(host, options);
  } catch (const std::exception& e) {
    throw Error(fmt::format("cannot serve a rendezvous store on {}:{}: {}{}", host, port,
                            util::first_sentence(e),
                            port == 0 ? ""
                                      : "; if another process holds the port, give the run a "
                                        "free one (trainer fit --master-port)"));
  }
}

LaunchResult launch(const LaunchOptions& options, std::ostream& out, std::ostream& err) {
  TORCH_INTERNAL_ASSERT(!options.command().empty() && options.slots() >= 1 &&
                        options.nnodes() >= 1);
  if (options.nnodes() > 1 && options.master_port() == 0) {
    throw UsageError("a run over several nodes needs --master-port (and --master-addr)");
  }
  util::survive_broken_pipes();
  c10::intrusive_ptr<c10d::TCPStore> store;
  int port = options.master_port();
  dist::check_store_host(options.master_addr(), options.node_rank() == 0, "--master-addr");
  if (options.node_rank() == 0) {
    store = serve_store(options.master_addr(), options.master_port());
    port = store->getPort();
  }
  SignalCatcher forwarding;
  LaunchResult result = Supervisor(options, out, err).run(port);
  // Another node's ranks may still be reading the store (a roll call's outcome): it outlives a
  // failure by a moment, as the store of a rank that serves it does. (LibTorch 1.x's store client
  // ends its process with std::terminate when the server goes while it is connected.)
  if (store && options.nnodes() > 1 && result.exit_code != kExitOk) {
    std::this_thread::sleep_for(std::chrono::seconds(2));
  }
  return result;
}

}  // namespace crucible::launch
