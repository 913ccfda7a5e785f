#include "train/run_dir.h"

#include <unistd.h>

#include <system_error>

#include <chrono>
#include <ctime>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include <crucible/errors.h>

#include "checkpoint/checkpoint.h"
#include "config/diff.h"
#include "config/paths.h"
#include "config/yaml_reader.h"
#include "metrics/jsonl_sink.h"
#include "metrics/tensorboard_sink.h"
#include "plugin/loader.h"
#include "util/file_io.h"
#include "util/file_system.h"

namespace crucible::train {

std::string RunDir::checkpoints() const { return checkpoint::checkpoints_dir(path); }

namespace {

const std::set<std::string>& layout_files() {
  static const std::set<std::string> files = {
      "config.yaml", "trainer.log", "metrics.jsonl",    plugin::kTrialLibraryFile,
      "latest",      ".lock",       "experiment.jsonl", "experiment.log",
      "best"};
  return files;
}

const std::set<std::string>& layout_trees() {
  static const std::set<std::string> trees = {"checkpoints", "tensorboard", "profiling"};
  return trees;
}

// Whether `below`, the path components under a directory that holds a run or an experiment, name
// one of that directory's own files.
bool is_layout_file(const std::vector<std::string>& below) {
  if (below.size() == 1) return layout_files().count(below[0]) > 0;
  return layout_trees().count(below[0]) > 0 || (below[0] == "trials" && below.size() == 2);
}

// A file of `dir` that neither a run nor an experiment writes ("" when there is none). The
// temporary of one of their files (util::replace_atomically's NAME.tmp, left by a process killed
// while it wrote it) is theirs.
std::string foreign_file(const std::string& dir) {
  const auto ours = [](const std::string& name) {
    return layout_files().count(name) > 0 || name == "report.html";
  };
  const std::string tmp = ".tmp";
  for (const std::string& name : util::list_directory(dir)) {
    const bool temporary = name.size() > tmp.size() &&
                           name.compare(name.size() - tmp.size(), tmp.size(), tmp) == 0 &&
                           ours(name.substr(0, name.size() - tmp.size()));
    if (!temporary && !ours(name) && !layout_trees().count(name) && name != "trials") {
      return name;
    }
  }
  return "";
}

}  // namespace

namespace {

// The nearest of `path` and the directories above it that exists, when it is not a directory;
// "" when that is a directory.
std::string file_in_the_way(const std::string& path) {
  for (std::string p = util::lexically_normal(util::absolute(path));;) {
    if (util::exists(p)) return util::is_directory(p) ? "" : p;
    const std::string parent = util::parent_path(p);
    if (parent.empty() || parent == p) return "";
    p = parent;
  }
}

}  // namespace

void check_output_dir(const std::string& dir) {
  const std::string blocker = file_in_the_way(dir);
  if (!blocker.empty()) {
    throw UsageError(blocker == util::lexically_normal(util::absolute(dir))
                         ? fmt::format("--output {}: a file, not a directory", dir)
                         : fmt::format("--output {}: {} is a file, not a directory", dir, blocker));
  }
  if (!util::exists(dir)) return;
  // A run or an experiment (holds_run_of decides whether it is this config's) may hold files of
  // the user's beside its own: a job's log, predictions.
  if (holds_run_or_experiment(dir)) return;
  const std::string foreign = foreign_file(dir);
  if (!foreign.empty()) {
    throw UsageError(
        fmt::format("--output {}: the directory holds other files ({} and maybe more) and no "
                    "run; give a new or empty directory",
                    dir, foreign));
  }
}

void check_output_file(const std::string& path, const std::string& flag) {
  const std::string full = util::absolute(path);
  if (path.empty() || path.back() == '/' || util::is_directory(full)) {
    throw UsageError(fmt::format("{} {}: a directory; give the file to write", flag, path));
  }
  // Where the file really goes: links and '..' resolved as the write will resolve them.
  const std::string dir = util::canonical_or_absolute(util::parent_path(full));
  if (!util::is_directory(dir)) {
    throw UsageError(
        fmt::format("{} {}: directory {} does not exist", flag, path, util::lexically_normal(dir)));
  }
  std::vector<std::string> below = {util::file_name(full)};
  for (std::string up = dir; below.size() <= 3; up = util::parent_path(up)) {
    if (util::exists(util::join(up, "config.yaml"))) {
      if (is_layout_file(below)) {
        throw UsageError(fmt::format("{} {}: a file of the run or experiment {}; write elsewhere",
                                     flag, path, up));
      }
      return;
    }
    if (util::parent_path(up) == up) return;
    below.insert(below.begin(), util::file_name(up));
  }
}

void RunDir::keep_reports_until(int64_t batches,
                                const std::function<void(const std::string&)>& warn) const {
  metrics::truncate_metrics_file(metrics_file(), batches, warn);
  metrics::truncate_metrics_file(profiling_metrics_file(), batches, warn);
  metrics::truncate_tensorboard(tensorboard_dir(), batches);
}

std::string new_run_id() {
  const auto now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&now, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", &tm);
  std::random_device rd;
  return fmt::format("{}-{:04x}", stamp, rd() & 0xffff);
}

namespace {

// Writes the absolute path of the run's trial library into the run directory, so that --resume,
// validate and predict load it from any working directory. A trial registered in the program
// itself, under an entrypoint that names no library found on disk, records none.
void record_trial_library(const ExperimentConfig& config, const RunDir& run) {
  std::string library;
  try {
    library = plugin::library_path(config.entrypoint, config::config_dir(config));
  } catch (const PluginError&) {
    return;
  }
  util::replace_atomically(util::join(run.path, plugin::kTrialLibraryFile), library + "\n");
}

}  // namespace

std::string new_run_path(const ExperimentConfig& config, const std::string& output_dir) {
  if (!output_dir.empty()) return output_dir;
  const std::string runs = config::runs_dir(config);
  const std::string blocker = file_in_the_way(runs);
  if (!blocker.empty()) {
    throw ConfigError(fmt::format(
        "{}: checkpoint_storage.host_path: {} is a file, not a directory; runs are written in "
        "<host_path>/<name>/ ({})",
        config::key_place(config, "checkpoint_storage.host_path"), blocker, runs));
  }
  return util::join(runs, new_run_id());
}

RunDir create_run_dir(const ExperimentConfig& config, const std::string& output_dir) {
  RunDir run;
  run.path = new_run_path(config, output_dir);
  if (util::exists(util::join(run.path, "config.yaml"))) {
    throw UsageError(fmt::format(
        "{} already holds a run; continue it with `trainer fit --resume {}` or choose another "
        "--output",
        run.path, run.path));
  }
  try {
    util::create_directories(run.checkpoints());
  } catch (const std::exception& e) {
    throw TrainingError(fmt::format("cannot create run directory {}: {}", run.path, e.what()));
  }
  // A run directory holds a run once its config.yaml exists: it is written last, whole or not
  // at all, so that a run cut short before it can be started again with the same --output.
  record_trial_library(config, run);
  try {
    util::replace_atomically(run.config_file(), to_yaml(config));
  } catch (const std::exception& e) {
    throw TrainingError(fmt::format("cannot write {}: {}", run.config_file(), e.what()));
  }
  return run;
}

RunDir open_run_dir(const std::string& path) {
  RunDir run{path};
  if (!util::is_directory(path)) {
    throw UsageError(fmt::format("--resume {}: {}", path, util::not_a_directory(path)));
  }
  const std::string reason = not_a_run_reason(path);
  if (!reason.empty()) {
    throw UsageError(fmt::format("--resume {}: not a run directory ({})", path, reason));
  }
  return run;
}

std::shared_ptr<util::FileLock> lock_run_dir(const std::string& dir,
                                             const std::function<void(const std::string&)>& warn) {
  std::unique_ptr<util::FileLock> lock;
  const std::string path = util::join(dir, ".lock");
  try {
    util::create_directories(dir);
    // A process killed a moment ago (a killed search's trials) may still be exiting.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (!(lock = util::FileLock::try_lock(path)) &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  } catch (const std::system_error& e) {
    const int code = e.code().value();
    if (code != ENOSYS && code != EOPNOTSUPP && code != ENOLCK) {
      throw TrainingError(fmt::format("cannot lock {}: {}", dir, e.what()));
    }
    warn(
        fmt::format("{}: the file system does not lock files ({}); make sure no other process "
                    "writes this directory",
                    dir, e.what()));
    return nullptr;
  } catch (const std::exception& e) {
    throw TrainingError(fmt::format("cannot lock {}: {}", dir, e.what()));
  }
  if (!lock) {
    throw UsageError(fmt::format(
        "{}: another process is writing it (it holds {}); wait for that process to end or stop "
        "it",
        dir, path));
  }
  return lock;
}

bool holds_run_or_experiment(const std::string& dir) {
  if (!util::is_regular_file(util::join(dir, "config.yaml"))) return false;
  for (const std::string& name : util::list_directory(dir)) {
    if (name == "config.yaml" || name == ".lock") continue;
    if (layout_files().count(name) || layout_trees().count(name) || name == "trials") return true;
  }
  return foreign_file(dir).empty();
}

std::string not_a_run_reason(const std::string& dir) {
  if (!util::is_regular_file(util::join(dir, "config.yaml"))) return "no config.yaml in it";
  if (holds_run_or_experiment(dir)) return "";
  return fmt::format(
      "beside its config.yaml it holds other files ({} and maybe more) and nothing a run writes "
      "(trainer.log, metrics.jsonl, checkpoints/)",
      foreign_file(dir));
}

bool holds_run_of(const ExperimentConfig& config, const std::string& dir) {
  if (dir.empty()) return false;
  const std::string file = util::join(dir, "config.yaml");
  if (!util::exists(file)) return false;
  const ExperimentConfig recorded = load_experiment_config(file);
  // A search that drew its seed recorded it: a config that gives none is the same config.
  ExperimentConfig given = config;
  if (!given.reproducibility.experiment_seed) {
    given.reproducibility.experiment_seed = recorded.reproducibility.experiment_seed;
  }
  const auto changes = config::diff(recorded, given);
  if (changes.empty()) return true;
  std::string list;
  for (const auto& c : changes) list += fmt::format("\n  {}: {} -> {}", c.key, c.before, c.after);
  const char* what = util::exists(util::join(dir, "experiment.jsonl")) ? "an experiment" : "a run";
  throw UsageError(fmt::format(
      "--output {}: it holds {} of another config; continue it with `trainer fit --resume {}` "
      "or choose another --output. Its config.yaml differs in:{}",
      dir, what, dir, list));
}

}  // namespace crucible::train
