#pragma once

#include <exception>
#include <stdexcept>
#include <string>

namespace crucible {

// Process exit codes of the `trainer` command. Every Error carries the code it maps to.
enum ExitCode : int {
  kExitOk = 0,
  kExitTrainingFailed = 1,  // the trial threw, a loss became NaN, a file could not be written
  kExitBadUsage = 2,        // bad command line or experiment configuration
  kExitPlugin = 3,          // the trial library could not be loaded or the trial not created
  kExitStopped = 4,         // stopped by SIGTERM, SIGUSR1, SIGINT, SIGHUP or a closed console
                            // after writing a checkpoint; continue with
                            // `trainer fit --resume RUN_DIR`
  kExitPeerLost = 5,        // a collective failed because another rank died, hangs or is
                            // unreachable; the launcher names that rank
  kExitInvalidHyperparameters = 6,  // the trial rejected its hyperparameters
                                    // (InvalidHyperparameters); a search replaces the trial
  kExitInterrupted = 130,           // a second SIGINT: stopped at once, without a checkpoint
};

// Base of every error Crucible reports to a user. what() is a complete, user-facing message
// (cause and place); the CLI prints it without a stack trace and exits with exit_code(). An error
// that Crucible passes on with context added (naming the trial method or callback that threw it)
// is an Error with the longer message and the same exit code, and holds the original, of its own
// type, as its nested exception (std::rethrow_if_nested).
class Error : public std::runtime_error {
 public:
  Error(const std::string& message, int exit_code = kExitTrainingFailed)
      : std::runtime_error(message), exit_code_(exit_code) {}
  int exit_code() const { return exit_code_; }

 private:
  int exit_code_;
};

// A bad experiment file or override. The message starts with the location: `file:line:col:`.
class ConfigError : public Error {
 public:
  explicit ConfigError(const std::string& message) : Error(message, kExitBadUsage) {}
};

// A bad command line.
class UsageError : public Error {
 public:
  explicit UsageError(const std::string& message) : Error(message, kExitBadUsage) {}
};

// A trial library that cannot be found, loaded, matched or instantiated.
class PluginError : public Error {
 public:
  explicit PluginError(const std::string& message) : Error(message, kExitPlugin) {}
};

// Training could not go on: the trial threw, a metric is not finite, data is missing, I/O failed.
class TrainingError : public Error {
 public:
  explicit TrainingError(const std::string& message) : Error(message, kExitTrainingFailed) {}
};

// A collective with the other ranks failed: a peer rank died, hangs or cannot be reached. The
// message names this rank, the operation and the timeout. Training cannot go on; the last
// checkpoint stays loadable.
class PeerLostError : public Error {
 public:
  explicit PeerLostError(const std::string& message) : Error(message, kExitPeerLost) {}
};

// Thrown by a trial (usually from its constructor) whose hyperparameters cannot work together,
// e.g. a kernel larger than its input. A search records the trial as invalid and replaces it
// with a new one instead of retrying it; a single run exits with kExitInvalidHyperparameters.
class InvalidHyperparameters : public Error {
 public:
  explicit InvalidHyperparameters(const std::string& message)
      : Error(message, kExitInvalidHyperparameters) {}
};

// What `e` says, without the native stack trace LibTorch appends to its messages (from
// "Exception raised from" on, or from a line starting "frame #0:" where a failed CAFFE_ENFORCE
// lists the frames without that line) and the blank lines before it.
inline std::string message_without_trace(const std::exception& e) {
  std::string message = e.what();
  for (const char* marker : {"Exception raised from", "\nframe #0:"}) {
    const auto trace = message.find(marker);
    if (trace != std::string::npos) message.erase(trace);
  }
  while (!message.empty() && message.back() == '\n') message.pop_back();
  return message;
}

}  // namespace crucible
