#include "train/run_dir.h"

#include <unistd.h>

#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <random>

#include <fmt/format.h>

#include <crucible/errors.h>

namespace crucible::train {
namespace fs = std::filesystem;

namespace {

std::string new_run_id() {
  const auto now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&now, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", &tm);
  std::random_device rd;
  return fmt::format("{}-{:04x}", stamp, rd() & 0xffff);
}

}  // namespace

RunDir create_run_dir(const ExperimentConfig& config, const std::string& output_dir) {
  RunDir run;
  run.path =
      output_dir.empty()
          ? (fs::path(config.checkpoint_storage.host_path) / config.name / new_run_id()).string()
          : output_dir;
  std::error_code ec;
  if (fs::exists(fs::path(run.path) / "config.yaml", ec)) {
    throw UsageError(fmt::format(
        "{} already holds a run; continue it with `trainer fit --resume {}` or choose another "
        "--output",
        run.path, run.path));
  }
  fs::create_directories(fs::path(run.path) / "checkpoints", ec);
  if (ec) {
    throw TrainingError(fmt::format("cannot create run directory {}: {}", run.path, ec.message()));
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
  if (!fs::exists(run.config_file())) {
    throw UsageError(fmt::format("--resume {}: not a run directory (no config.yaml in it)", path));
  }
  return run;
}

}  // namespace crucible::train
