#include <crucible/experiment.h>

#include <chrono>
#include <cstdlib>

#include <fmt/format.h>

#include "distributed/backend.h"
#include "distributed/collectives.h"
#include "distributed/rendezvous.h"

namespace crucible {
namespace {

// How long a rank waits for the others (the rendezvous, each collective):
// $CRUCIBLE_DIST_TIMEOUT seconds when set, else resources.distributed_timeout_seconds.
std::chrono::milliseconds dist_timeout(const ExperimentConfig& config) {
  const char* env = std::getenv("CRUCIBLE_DIST_TIMEOUT");
  double seconds = config.resources.distributed_timeout_seconds;
  if (env) {
    char* end = nullptr;
    seconds = std::strtod(env, &end);
    // As the config key: a number, nothing after it, > 0 and at most 1e12.
    if (end == env || *end != '\0' || !(seconds > 0 && seconds <= 1e12)) {
      throw UsageError(
          fmt::format("CRUCIBLE_DIST_TIMEOUT={}: expected seconds > 0 and at most 1e12", env));
    }
  }
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

}  // namespace

std::optional<DistributedContext> join_launched_run(const ExperimentConfig& config) {
  const auto rendezvous = dist::from_environment(dist::process_environment());
  if (!rendezvous) return std::nullopt;
  // Whether NCCL carries the ranks' CUDA tensors is decided when they meet, for all of them; an
  // nccl that cannot work is refused there on every rank.
  return dist::connect(*rendezvous, dist_timeout(config), config.resources.distributed_backend);
}

}  // namespace crucible
