#include <crucible/experiment.h>

#include <fstream>
#include <iostream>
#include <iterator>

#include <fmt/format.h>

#include "distributed/backend.h"
#include "distributed/rendezvous.h"
#include "launch/launcher.h"
#include "util/file_system.h"

namespace crucible {
namespace {

// This process's command line, its program named by /proc/self/exe.
std::vector<std::string> own_command_line() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  const std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> args;
  for (size_t start = 0; start < all.size();) {
    const size_t end = all.find('\0', start);
    args.push_back(all.substr(start, end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  if (args.empty()) args.emplace_back();
  args[0] = util::read_symlink("/proc/self/exe");
  return args;
}

// Runs this node's share of the run's `slots` workers under the built-in launcher.
ExperimentResult launch_workers(const ExperimentOptions& o, int64_t slots) {
  if (o.node_rank() < 0 || o.node_rank() >= o.nnodes()) {
    throw UsageError(
        fmt::format("--node-rank {} is outside --nnodes {}", o.node_rank(), o.nnodes()));
  }
  if (slots % o.nnodes() != 0) {
    throw UsageError(fmt::format(
        "resources.slots_per_trial ({}) must be a multiple of --nnodes ({}): every node runs "
        "the same number of slots",
        slots, o.nnodes()));
  }
  launch::LaunchOptions options;
  options.command = o.worker_command().empty() ? own_command_line() : o.worker_command();
  options.slots = slots / o.nnodes();
  options.nnodes = o.nnodes();
  options.node_rank = o.node_rank();
  options.master_addr = o.master_addr();
  options.master_port = o.master_port();
  const launch::LaunchResult launched = launch::launch(options, std::cout, std::cerr);
  ExperimentResult result;
  result.exit_code = launched.exit_code;
  result.failure = launched.failure;
  return result;
}

}  // namespace

ExperimentResult run_experiment(const ExperimentOptions& options) {
  const std::string& resume = options.fit().resume_dir();
  if (options.config_file().empty() == resume.empty()) {
    throw UsageError("trainer fit needs exactly one of CONFIG and --resume RUN_DIR");
  }
  if (!resume.empty() && !options.fit().output_dir().empty()) {
    throw UsageError(
        "--resume continues a run in its own directory; --output cannot be combined with it");
  }
  const std::string path = resume.empty() ? options.config_file() : resume + "/config.yaml";
  if (!resume.empty() && !util::exists(path)) {
    throw UsageError(
        fmt::format("--resume {}: not a run directory (no config.yaml in it)", resume));
  }
  std::vector<std::string> overrides = options.overrides();
  if (options.slots()) {
    overrides.push_back(fmt::format("resources.slots_per_trial={}", *options.slots()));
  }
  ExperimentConfig config = load_experiment_config(path, overrides);
  TrialFactory factory = load_trial(config);
  const int64_t slots = config.resources.slots_per_trial;
  std::optional<DistributedContext> joined = join_launched_run(config);
  if (!joined && (slots > 1 || options.nnodes() > 1)) {
    // One clear error here rather than one per worker.
    factory.check_evaluation_methods();
    dist::use_nccl(config.resources.distributed_backend, dist::rank_device(0),
                   slots / options.nnodes());
    return launch_workers(options, slots);
  }
  FitOptions fit = options.fit();
  fit.distributed(joined ? *joined : DistributedContext());
  ExperimentResult result;
  result.fit = Trainer(std::move(config), std::move(factory)).fit(fit);
  result.exit_code = result.fit->stopped ? kExitStopped : kExitOk;
  return result;
}

}  // namespace crucible
