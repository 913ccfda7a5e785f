#include "cli.h"

#include <csignal>
#include <fstream>
#include <iostream>
#include <optional>

#include <fmt/format.h>
#include <torch/version.h>

#include <crucible/crucible.h>

#include "dist/backend.h"
#include "dist/collectives.h"
#include "dist/rendezvous.h"
#include "launch/launcher.h"
#include "plugin/loader.h"
#include "util/file_system.h"
#include "util/parse.h"

namespace crucible::cli {

namespace {

constexpr const char* kUsage = R"(usage: trainer <command> [options]

Commands:
  fit CONFIG                  train the trial an experiment file describes
  check CONFIG                validate an experiment file, load its trial, print the resolved config
  validate --checkpoint DIR   run the trial's validation on a checkpoint, print the metrics
  predict --checkpoint DIR    write the trial's predictions over its predict data to a file

Options:
  --help           show help (also `trainer <command> --help`)
  --version        print the Crucible and LibTorch versions

Exit codes: 0 done, 1 training failed, 2 bad usage or config, 3 trial library or trial class,
4 stopped by SIGTERM/SIGUSR1/SIGINT after a checkpoint (continue with --resume), 130 a second
SIGINT (stopped at once).
)";

constexpr const char* kFitUsage = R"(usage: trainer fit CONFIG [options]
       trainer fit --resume RUN_DIR [options]

Trains the trial of experiment file CONFIG and writes a run directory
<checkpoint_storage.host_path>/<name>/<run-id>/ holding config.yaml, trainer.log, metrics.jsonl
and checkpoints/.

Options:
  --test-mode        train 1 batch, validate 1 batch, save a checkpoint and load it back
  --set KEY=VALUE    override a config key (dotted path, value typed by YAML); repeatable
  --output DIR       write the run into DIR instead of a new run directory
  --resume RUN_DIR   continue RUN_DIR from its newest good checkpoint with its config.yaml;
                     --set changes to it are refused unless safe and --allow-safe-changes
  --allow-safe-changes
                     with --resume: accept changed lengths, periods, scheduling_unit and
                     retention counts
  --warm-start CKPT  start a new run from the model weights of checkpoint CKPT
  --slots N          train on N processes of this machine (resources.slots_per_trial)
  --nnodes N, --node-rank R, --master-addr HOST, --master-port PORT
                     a run over N machines: start `trainer fit` on each, with its rank;
                     each runs slots_per_trial / N workers; node 0 serves the rendezvous
                     at HOST:PORT
  --quiet            write reports to the run's log only
  --help             show this help

Trial libraries named in `entrypoint` are looked up in $CRUCIBLE_TRIAL_PATH, the config's
directory, the trainer's directory and <prefix>/lib/crucible/trials.

Distributed: with slots_per_trial > 1 `trainer fit` starts one worker per slot, prefixes their
output with [rank R] and stops them all when one fails. Under torchrun, mpirun or srun each
process joins the run their variables describe instead. resources.distributed_timeout_seconds
(default 300; $CRUCIBLE_DIST_TIMEOUT overrides it) bounds every wait for another rank.
)";

constexpr const char* kValidateUsage = R"(usage: trainer validate --checkpoint DIR

Restores checkpoint DIR (a run's checkpoints/batch-<N>) with the config it was written with,
runs the trial's validation and prints the reduced metrics as JSON.
)";

constexpr const char* kPredictUsage = R"(usage: trainer predict --checkpoint DIR [--output FILE]

Restores checkpoint DIR, runs the trial's predict_batch over build_predict_data_loader() (by
default the validation data) and writes {"predictions": tensor} to FILE (default
predictions.pt), readable with torch.load in Python and torch::pickle_load in C++.
)";

constexpr const char* kCheckUsage = R"(usage: trainer check CONFIG [--set KEY=VALUE]...

Validates CONFIG, loads its trial library and finds the trial class, then prints the resolved
configuration (every default spelled out) as YAML. Exit code 0 when all is well.
)";

struct Args {
  std::string command;
  std::string config;
  std::vector<std::string> overrides;
  std::string output;
  std::string resume;
  std::string warm_start;
  std::string checkpoint;
  std::optional<int64_t> slots;
  int64_t nnodes = 1;
  int64_t node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;
  std::vector<std::string> argv;  // the whole command line, for the launcher's workers
  bool allow_safe_changes = false;
  bool test_mode = false;
  bool quiet = false;
  bool help = false;
};

// `text` as an integer of at least `min`, or a UsageError naming `flag`.
int64_t positive(const std::string& text, const std::string& flag, int64_t min = 1) {
  const auto v = util::whole_integer(text);
  if (!v || *v < min) {
    throw UsageError(fmt::format("{} {}: expected an integer of at least {}", flag, text, min));
  }
  return *v;
}

Args parse(const std::vector<std::string>& args) {
  Args a;
  a.argv = args;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    auto value = [&](const std::string& flag) -> std::string {
      const auto eq = arg.find('=');
      if (eq != std::string::npos && arg.rfind("--", 0) == 0 && flag != "--set") {
        return arg.substr(eq + 1);
      }
      if (i + 1 >= args.size()) throw UsageError(flag + " needs a value");
      return args[++i];
    };
    const std::string flag = arg.substr(0, arg.find('='));
    if (arg == "--help" || arg == "-h") {
      a.help = true;
    } else if (arg == "--test-mode" && a.command == "fit") {
      a.test_mode = true;
    } else if (arg == "--quiet" && a.command == "fit") {
      a.quiet = true;
    } else if (arg == "--allow-safe-changes" && a.command == "fit") {
      a.allow_safe_changes = true;
    } else if (flag == "--warm-start" && a.command == "fit") {
      a.warm_start = value("--warm-start");
    } else if (flag == "--checkpoint" && (a.command == "validate" || a.command == "predict")) {
      a.checkpoint = value("--checkpoint");
    } else if (arg == "--set" && (a.command == "fit" || a.command == "check")) {
      a.overrides.push_back(value("--set"));
    } else if (flag == "--output" && (a.command == "fit" || a.command == "predict")) {
      a.output = value("--output");
    } else if (flag == "--resume" && a.command == "fit") {
      a.resume = value("--resume");
    } else if (flag == "--slots" && a.command == "fit") {
      a.slots = positive(value("--slots"), "--slots");
    } else if (flag == "--nnodes" && a.command == "fit") {
      a.nnodes = positive(value("--nnodes"), "--nnodes");
    } else if (flag == "--node-rank" && a.command == "fit") {
      a.node_rank = positive(value("--node-rank"), "--node-rank", 0);
    } else if (flag == "--master-addr" && a.command == "fit") {
      a.master_addr = value("--master-addr");
    } else if (flag == "--master-port" && a.command == "fit") {
      a.master_port = static_cast<int>(positive(value("--master-port"), "--master-port"));
    } else if (arg.rfind("-", 0) == 0) {
      throw UsageError(fmt::format("unknown option '{}'{}; see `trainer {}--help`", arg,
                                   a.command.empty() ? "" : " for " + a.command,
                                   a.command.empty() ? "" : a.command + " "));
    } else if (a.command.empty()) {
      if (arg != "fit" && arg != "check" && arg != "validate" && arg != "predict") {
        throw UsageError(
            fmt::format("unknown command '{}'; commands: fit, check, validate, predict", arg));
      }
      a.command = arg;
    } else if (a.config.empty()) {
      a.config = arg;
    } else {
      throw UsageError(fmt::format("unexpected argument '{}'", arg));
    }
  }
  return a;
}

std::string config_dir(const std::string& config_path) {
  return util::parent_path(util::absolute(config_path));
}

// How long a rank waits for the others (the rendezvous, each collective):
// $CRUCIBLE_DIST_TIMEOUT seconds when set, else resources.distributed_timeout_seconds.
std::chrono::milliseconds dist_timeout(const ExperimentConfig& config) {
  const char* env = std::getenv("CRUCIBLE_DIST_TIMEOUT");
  const double seconds = env ? std::atof(env) : config.resources.distributed_timeout_seconds;
  if (!(seconds > 0)) {
    throw UsageError(fmt::format("CRUCIBLE_DIST_TIMEOUT={}: expected seconds > 0", env));
  }
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

// Runs this same command line under the built-in launcher: this node's share of the run's
// `slots` (slots_per_trial counts the processes of all --nnodes nodes).
int launch_workers(const Args& a, int64_t slots) {
  if (a.node_rank >= a.nnodes) {
    throw UsageError(fmt::format("--node-rank {} is outside --nnodes {}", a.node_rank, a.nnodes));
  }
  if (slots % a.nnodes != 0) {
    throw UsageError(fmt::format(
        "resources.slots_per_trial ({}) must be a multiple of --nnodes ({}): every node runs "
        "the same number of slots",
        slots, a.nnodes));
  }
  launch::LaunchOptions options;
  options.command = {util::read_symlink("/proc/self/exe")};
  options.command.insert(options.command.end(), a.argv.begin(), a.argv.end());
  options.slots = slots / a.nnodes;
  options.nnodes = a.nnodes;
  options.node_rank = a.node_rank;
  options.master_addr = a.master_addr;
  options.master_port = a.master_port;
  const launch::LaunchResult result = launch::launch(options, std::cout, std::cerr);
  if (!result.failure.empty()) std::cerr << "error: " << result.failure << "\n";
  return result.exit_code;
}

int fit(const Args& a) {
  if (a.config.empty() == a.resume.empty()) {
    throw UsageError("trainer fit needs exactly one of CONFIG and --resume RUN_DIR");
  }
  if (!a.resume.empty() && !a.output.empty()) {
    throw UsageError(
        "--resume continues a run in its own directory; --output cannot be combined with it");
  }
  const std::string path = a.resume.empty() ? a.config : a.resume + "/config.yaml";
  if (!a.resume.empty() && !util::exists(path)) {
    throw UsageError(
        fmt::format("--resume {}: not a run directory (no config.yaml in it)", a.resume));
  }
  std::vector<std::string> overrides = a.overrides;
  if (a.slots) overrides.push_back(fmt::format("resources.slots_per_trial={}", *a.slots));
  ExperimentConfig config = load_experiment_config(path, overrides);
  TrialFactory factory = plugin::resolve_entrypoint(config.entrypoint, config_dir(path));
  const auto rendezvous = dist::from_environment(dist::process_environment());
  if (!rendezvous && (config.resources.slots_per_trial > 1 || a.nnodes > 1)) {
    // One clear error here rather than one per worker.
    factory.check_evaluation_methods();
    dist::use_nccl(config.resources.distributed_backend, dist::rank_device(0),
                   config.resources.slots_per_trial / a.nnodes);
    return launch_workers(a, config.resources.slots_per_trial);
  }
  DistributedContext distributed;
  if (rendezvous) {
    const bool nccl = dist::use_nccl(config.resources.distributed_backend,
                                     dist::rank_device(rendezvous->topology.local_rank),
                                     rendezvous->topology.local_size);
    distributed = dist::connect(*rendezvous, dist_timeout(config), nccl);
  }
  FitOptions options;
  options.distributed(distributed);
  options.test_mode(a.test_mode)
      .output_dir(a.output)
      .resume_dir(a.resume)
      .console(!a.quiet)
      .allow_safe_changes(a.allow_safe_changes)
      .warm_start(a.warm_start);
  const FitResult result = Trainer(std::move(config), std::move(factory)).fit(options);
  return result.stopped ? kExitStopped : kExitOk;
}

// The trainer for a checkpoint: the config it was written with, and its trial.
Trainer trainer_for_checkpoint(const std::string& dir) {
  if (dir.empty()) throw UsageError("--checkpoint DIR is required");
  const std::string meta_path = util::join(dir, "metadata.json");
  std::ifstream in(meta_path);
  if (!in) {
    throw UsageError(
        fmt::format("--checkpoint {}: not a checkpoint (no readable metadata.json)", dir));
  }
  const auto meta = nlohmann::json::parse(in, nullptr, false);
  if (meta.is_discarded() || !meta.contains("config")) {
    throw TrainingError(fmt::format("{}: damaged or not Crucible checkpoint metadata", meta_path));
  }
  ExperimentConfig config = parse_experiment_config(meta["config"].get<std::string>(), meta_path);
  const std::string run_dir = util::parent_path(util::parent_path(util::absolute(dir)));
  TrialFactory factory = plugin::resolve_entrypoint(config.entrypoint, run_dir);
  return Trainer(std::move(config), std::move(factory));
}

int validate(const Args& a) {
  const nlohmann::json metrics = trainer_for_checkpoint(a.checkpoint).validate(a.checkpoint);
  std::cout << metrics.dump(2) << "\n";
  return kExitOk;
}

int predict(const Args& a) {
  const std::string output = a.output.empty() ? "predictions.pt" : a.output;
  const int64_t rows = trainer_for_checkpoint(a.checkpoint).predict(a.checkpoint, output);
  std::cout << "wrote " << rows << " predictions to " << output << "\n";
  return kExitOk;
}

int check(const Args& a) {
  if (a.config.empty()) throw UsageError("trainer check needs a CONFIG file");
  ExperimentConfig config = load_experiment_config(a.config, a.overrides);
  TrialFactory factory = plugin::resolve_entrypoint(config.entrypoint, config_dir(a.config));
  factory.check_evaluation_methods();
  std::cout << "# " << a.config << ": OK (trial " << factory.name << ")\n" << to_yaml(config);
  return kExitOk;
}

}  // namespace

int run(const std::vector<std::string>& args) {
  // Past a file-size limit, writes must fail with EFBIG (reported with the path), not kill us.
  std::signal(SIGXFSZ, SIG_IGN);
  try {
    if (!args.empty() && args[0] == "--version") {
      std::cout << "trainer (Crucible) " << CRUCIBLE_VERSION_STRING << ", LibTorch "
                << TORCH_VERSION << "\n";
      return kExitOk;
    }
    const Args a = parse(args);
    if (a.command.empty()) {
      (a.help ? std::cout : std::cerr) << kUsage;
      return a.help ? kExitOk : kExitBadUsage;
    }
    if (a.help) {
      std::cout << (a.command == "fit"        ? kFitUsage
                    : a.command == "check"    ? kCheckUsage
                    : a.command == "validate" ? kValidateUsage
                                              : kPredictUsage);
      return kExitOk;
    }
    if (a.command == "fit") return fit(a);
    if (a.command == "check") return check(a);
    if (!a.config.empty()) throw UsageError("unexpected argument '" + a.config + "'");
    return a.command == "validate" ? validate(a) : predict(a);
  } catch (const Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return e.exit_code();
  } catch (const std::exception& e) {
    std::string msg = e.what();
    std::cerr << "error: " << msg.substr(0, msg.find("\nException raised from")) << "\n";
    return kExitTrainingFailed;
  }
}

}  // namespace crucible::cli
