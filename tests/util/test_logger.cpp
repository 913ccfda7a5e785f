// util::Logger's console: what a line that stdout or stderr cannot take leaves behind.
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <string>

#include "catch.h"

#include "files.h"
#include "text.h"
#include "util/broken_pipes.h"
#include "util/logger.h"

using namespace crucible::testing;
using crucible::util::Logger;

namespace {

// While one lives, a write to a closed pipe fails with EPIPE instead of ending the test; the
// SIGPIPE disposition found comes back afterwards.
class SurvivedPipes {
 public:
  SurvivedPipes() {
    sigaction(SIGPIPE, nullptr, &saved_);
    crucible::util::survive_broken_pipes();
  }
  ~SurvivedPipes() { sigaction(SIGPIPE, &saved_, nullptr); }

 private:
  struct sigaction saved_ = {};
};

// Runs `write` with file descriptor `fd` (stdout or stderr) on `target`, then puts `fd` back and
// closes `target`. Nothing may report to Catch2 inside `write`.
template <typename Write>
void with_fd(int fd, int target, const Write& write) {
  std::cout.flush();
  std::cerr.flush();
  const int saved = dup(fd);
  dup2(target, fd);
  close(target);
  write();
  dup2(saved, fd);
  close(saved);
  std::cout.clear();
  std::cerr.clear();
  clearerr(stdout);
  clearerr(stderr);
}

// A pipe's ends {read, write}.
struct Pipe {
  int read = -1, write = -1;
  Pipe() {
    int fds[2];
    REQUIRE(pipe(fds) == 0);
    read = fds[0];
    write = fds[1];
  }
  // What was written, once every write end is closed.
  std::string drain() {
    std::string out;
    char buf[4096];
    for (ssize_t n; (n = ::read(read, buf, sizeof(buf))) > 0;)
      out.append(buf, static_cast<size_t>(n));
    close(read);
    return out;
  }
};

// The write end of a pipe whose reader has gone.
int closed_pipe() {
  Pipe p;
  close(p.read);
  return p.write;
}

}  // namespace

TEST_CASE("a console whose reader went away is closed for good and named, the file gets it all",
          "[util]") {
  SurvivedPipes survived;
  TempDir tmp;
  const std::string log = tmp / "trainer.log";
  Logger logger;
  logger.open(log, /*console=*/true);
  Pipe open_reader;
  with_fd(STDOUT_FILENO, open_reader.write, [&] {
    logger.info("read 1");
    logger.info("read 2");
  });
  CHECK(open_reader.drain() == "read 1\nread 2\n");
  CHECK(logger.console_lost().empty());

  with_fd(STDOUT_FILENO, closed_pipe(), [&] {
    for (int i = 0; i < 3; ++i) logger.info("unread " + std::to_string(i));
  });
  CHECK(logger.console_lost() == "standard output: Broken pipe");

  // Standard output is closed for this logger from then on; warnings still go to stderr.
  Pipe out, err;
  with_fd(STDOUT_FILENO, out.write, [&] {
    with_fd(STDERR_FILENO, err.write, [&] {
      logger.info("after");
      logger.warn("careful");
    });
  });
  CHECK(out.drain().empty());
  CHECK(err.drain() == "warning: careful\n");
  const std::string text = read_file(log);
  CHECK(std::count(text.begin(), text.end(), '\n') == 7);
  CHECK_THAT(text, Catch::Contains("INFO unread 2") && Catch::Contains("INFO after") &&
                       Catch::Contains("WARN careful"));
}

TEST_CASE("a console stream's reader gone is found before a line fails, where the logger writes",
          "[util]") {
  SurvivedPipes survived;
  TempDir tmp;
  const auto lost_with = [](Logger& logger, int fd, int target) {
    std::string lost;
    with_fd(fd, target, [&] { lost = logger.console_lost(); });
    return lost;
  };
  Logger fit;
  fit.open(tmp / "fit.log", /*console=*/true);
  // A pipe with its reader, a file, /dev/null: nothing to report.
  Pipe reading;
  CHECK(lost_with(fit, STDOUT_FILENO, reading.write).empty());
  CHECK(reading.drain().empty());
  CHECK(
      lost_with(fit, STDOUT_FILENO, open((tmp / "out").c_str(), O_WRONLY | O_CREAT, 0600)).empty());
  CHECK(lost_with(fit, STDERR_FILENO, open("/dev/null", O_WRONLY)).empty());
  // The reader gone, with no line written since: named at once, and closed for good.
  CHECK(lost_with(fit, STDOUT_FILENO, closed_pipe()) == "standard output: Broken pipe");
  Pipe out;
  with_fd(STDOUT_FILENO, out.write, [&] { fit.info("not written"); });
  CHECK(out.drain().empty());
  CHECK(read_file(tmp / "fit.log").find("INFO not written") != std::string::npos);

  // A local stream socket whose peer closed: the same.
  int sockets[2];
  REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, sockets) == 0);
  close(sockets[1]);
  Logger socket_fit;
  socket_fit.open(tmp / "socket.log", /*console=*/true);
  CHECK(lost_with(socket_fit, STDOUT_FILENO, sockets[0]) == "standard output: Broken pipe");

  // A logger that writes no info lines does not watch stdout, until its stderr is closed.
  Logger rank;
  rank.console_warnings_only();
  CHECK(lost_with(rank, STDOUT_FILENO, closed_pipe()).empty());
  CHECK(lost_with(rank, STDERR_FILENO, closed_pipe()) == "standard error: Broken pipe");
  // A quiet run (no console) watches neither.
  Logger quiet;
  quiet.open(tmp / "quiet.log", /*console=*/false);
  CHECK(lost_with(quiet, STDOUT_FILENO, closed_pipe()).empty());
  CHECK(lost_with(quiet, STDERR_FILENO, closed_pipe()).empty());
}

TEST_CASE("with stderr's reader gone, warnings go to stdout, and stderr stays the one named",
          "[util]") {
  SurvivedPipes survived;
  TempDir tmp;
  Logger logger;
  logger.open(tmp / "trainer.log", /*console=*/true);
  with_fd(STDERR_FILENO, closed_pipe(), [&] { logger.warn("lost"); });
  CHECK(logger.console_lost() == "standard error: Broken pipe");
  Pipe out;
  with_fd(STDOUT_FILENO, out.write, [&] { logger.warn("seen"); });
  CHECK(out.drain() == "warning: seen\n");
  with_fd(STDOUT_FILENO, closed_pipe(), [&] { logger.info("also lost"); });
  CHECK(logger.console_lost() == "standard error: Broken pipe");
}

TEST_CASE("another console write error loses the line only, noted once in the file", "[util]") {
  SurvivedPipes survived;
  TempDir tmp;
  const std::string log = tmp / "trainer.log";
  Logger logger;
  logger.open(log, /*console=*/true);
  const int full = open("/dev/full", O_WRONLY);
  REQUIRE(full >= 0);
  with_fd(STDOUT_FILENO, full, [&] {
    logger.info("first");
    logger.info("second");
  });
  CHECK(logger.console_lost().empty());
  Pipe out;
  with_fd(STDOUT_FILENO, out.write, [&] { logger.info("back"); });
  CHECK(out.drain() == "back\n");
  const std::string text = read_file(log);
  CHECK(count_of(text,
                 "cannot write to standard output: No space left on device; the console may "
                 "lack lines from here on") == 1);
  CHECK_THAT(text, Catch::Contains("INFO first") && Catch::Contains("INFO second") &&
                       Catch::Contains("INFO back"));
}
