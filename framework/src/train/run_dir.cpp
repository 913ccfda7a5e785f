#include "train/run_dir.h"

#include <unistd.h>

#include <chrono>
#include <cstring>
#include <ctime>
#include <fstream>
#include <random>

#include <fmt/format.h>

#include <crucible/errors.h>

#include "checkpoint/checkpoint.h"
#include "util/file_system.h"

namespace crucible::train {

std::string RunDir::checkpoints() const { return checkpoint::checkpoints_dir(path); }

std::string new_run_id() {
  const auto now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&now, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", &tm);
  std::random_device rd;
  return fmt::format("{}-{:04x}", stamp, rd() & 0xffff);
}

RunDir create_run_dir(const ExperimentConfig& config, const std::string& output_dir) {
  RunDir run;
  run.path =
      output_dir.empty()
          ? util::join(util::join(config.checkpoint_storage.host_path, config.name), new_run_id())
          : output_dir;
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
  std::ofstream out(run.config_file());
  out << to_yaml(config);
  out.close();
  if (!out) {
    throw TrainingError(
        fmt::format("cannot write {}: {}", run.config_file(), std::strerror(errno)));
  }
  return run;
}

RunDir open_run_dir(const std::string& path) {
  RunDir run{path};
  if (!util::exists(run.config_file())) {
    throw UsageError(fmt::format("--resume {}: not a run directory (no config.yaml in it)", path));
  }
  return run;
}

}  // namespace crucible::train
