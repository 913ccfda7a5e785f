#pragma once

// A one-node Slurm cluster of this machine (slurm_cluster.sh) for the life of a test.

#include <string>

#include <fmt/format.h>

#include "catch.h"
#include "process.h"

namespace crucible::testing {

class SlurmCluster {
 public:
  // Starts the daemons with their files in `dir`; fails the calling test when they do not come
  // up.
  explicit SlurmCluster(std::string dir) : dir_(std::move(dir)) {
    const auto up =
        run_command(fmt::format("{} start {} {} {}", script(), dir_, free_port(), free_port()));
    INFO(up.output);
    REQUIRE(up.exit_code == 0);
  }
  ~SlurmCluster() { run_command(fmt::format("{} stop {}", script(), dir_)); }
  SlurmCluster(const SlurmCluster&) = delete;
  SlurmCluster& operator=(const SlurmCluster&) = delete;

  // "SLURM_CONF=<its slurm.conf>", to put before a Slurm command.
  std::string env() const { return "SLURM_CONF=" + dir_ + "/slurm.conf"; }
  // What slurmd logged (one "launch task StepId=J.S request" line per job step).
  std::string slurmd_log() const { return read_file(dir_ + "/log/slurmd.log"); }

 private:
  static std::string script() {
    return std::string(CRUCIBLE_SOURCE_DIR) + "/tests/support/slurm_cluster.sh";
  }
  std::string dir_;
};

}  // namespace crucible::testing
