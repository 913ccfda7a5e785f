#include <crucible/experiment.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include <fmt/format.h>

#include <crucible/version.h>

#include "config/diff.h"
#include "distributed/backend.h"
#include "distributed/collectives.h"
#include "distributed/rendezvous.h"
#include "run/join.h"

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
    // As the config key: a number, nothing after it, at least 1 and at most 1e12.
    if (end == env || *end != '\0' || !(seconds >= 1 && seconds <= 1e12)) {
      throw UsageError(
          fmt::format("CRUCIBLE_DIST_TIMEOUT={}: expected seconds >= 1 and at most 1e12", env));
    }
  }
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

// The Crucible and LibTorch this process runs, as the ranks compare them.
std::string builds() {
  return fmt::format("crucible {}, libtorch {}", CRUCIBLE_VERSION_STRING, TORCH_VERSION);
}

// `config` as the ranks compare it: without each node's own paths (checkpoint_storage; a warm
// start's source, made absolute against the experiment file's folder, only as given or not).
ExperimentConfig comparable(ExperimentConfig config) {
  config.checkpoint_storage = CheckpointStorageConfig();
  for (std::string* path :
       {&config.searcher.source_trial_id, &config.searcher.source_checkpoint_uuid}) {
    if (!path->empty()) *path = "(given)";
  }
  return config;
}

// What every rank of a run must be started with: this Crucible and LibTorch, and with
// `compare_config` the comparable resolved config.
dist::Agreement agreement_on(const ExperimentConfig& config, bool compare_config) {
  dist::Agreement agreement;
  agreement.text = builds();
  if (!compare_config) return agreement;
  const ExperimentConfig compared = comparable(config);
  agreement.text += "\n" + to_yaml(compared);
  agreement.describe = [mine = agreement.text, compared](const std::string& theirs) {
    const size_t newline = theirs.find('\n');
    if (theirs.substr(0, newline) != builds()) {
      return fmt::format("the builds differ: {} -> {}", theirs.substr(0, newline), builds());
    }
    std::vector<config::Change> changes;
    try {
      // Parsing makes the placeholder paths absolute again: compared as this rank's are.
      changes = config::diff(
          comparable(parse_experiment_config(theirs.substr(newline + 1), "another rank's config")),
          compared);
    } catch (const Error&) {
      // Another build's config may not parse here: the lines say what differs.
    }
    if (changes.empty()) return dist::first_difference(theirs, mine);
    return fmt::format(
        "the configs differ:{}\ngive every node's launcher the same experiment file and --set "
        "options (checkpoint_storage may differ)",
        config::change_list(changes, [](const std::string&) { return true; }));
  };
  return agreement;
}

std::optional<DistributedContext> join(const ExperimentConfig& config, bool compare_config) {
  const auto rendezvous = dist::from_environment(dist::process_environment());
  if (!rendezvous) return std::nullopt;
  // Whether NCCL carries the ranks' CUDA tensors is decided when they meet, for all of them; an
  // nccl that cannot work is refused there on every rank.
  return dist::connect(*rendezvous, dist_timeout(config), config.resources.distributed_backend,
                       std::nullopt, agreement_on(config, compare_config));
}

}  // namespace

std::optional<DistributedContext> join_launched_run(const ExperimentConfig& config) {
  return join(config, /*compare_config=*/true);
}

std::optional<DistributedContext> run::join_launched_evaluation(const ExperimentConfig& config) {
  return join(config, /*compare_config=*/false);
}

}  // namespace crucible
