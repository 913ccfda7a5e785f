#include "cli.h"

#include <filesystem>
#include <iostream>

#include <fmt/format.h>
#include <torch/version.h>

#include <crucible/crucible.h>

#include "plugin/loader.h"

namespace crucible::cli {
namespace fs = std::filesystem;

namespace {

constexpr const char* kUsage = R"(usage: trainer <command> [options]

Commands:
  fit CONFIG       train the trial an experiment file describes
  check CONFIG     validate an experiment file, load its trial, print the resolved config

Options:
  --help           show help (also `trainer <command> --help`)
  --version        print the Crucible and LibTorch versions

Exit codes: 0 done, 1 training failed, 2 bad usage or config, 3 trial library or trial class.
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
  --resume RUN_DIR   continue RUN_DIR from its latest checkpoint (its config.yaml is used)
  --quiet            write reports to the run's log only
  --help             show this help

Trial libraries named in `entrypoint` are looked up in $CRUCIBLE_TRIAL_PATH, the config's
directory, the trainer's directory and <prefix>/lib/crucible/trials.
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
  bool test_mode = false;
  bool quiet = false;
  bool help = false;
};

Args parse(const std::vector<std::string>& args) {
  Args a;
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
    } else if (arg == "--set" && !a.command.empty()) {
      a.overrides.push_back(value("--set"));
    } else if (flag == "--output" && a.command == "fit") {
      a.output = value("--output");
    } else if (flag == "--resume" && a.command == "fit") {
      a.resume = value("--resume");
    } else if (arg.rfind("-", 0) == 0) {
      throw UsageError(fmt::format("unknown option '{}'{}; see `trainer {}--help`", arg,
                                   a.command.empty() ? "" : " for " + a.command,
                                   a.command.empty() ? "" : a.command + " "));
    } else if (a.command.empty()) {
      if (arg != "fit" && arg != "check") {
        throw UsageError(fmt::format("unknown command '{}'; commands: fit, check", arg));
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
  return fs::absolute(config_path).parent_path().string();
}

int fit(const Args& a) {
  if (a.config.empty() == a.resume.empty()) {
    throw UsageError("trainer fit needs exactly one of CONFIG and --resume RUN_DIR");
  }
  if (!a.resume.empty() && (!a.overrides.empty() || !a.output.empty())) {
    throw UsageError(
        "--resume continues a run with the config.yaml it was started with, in its "
        "own directory; --set and --output cannot be combined with it");
  }
  const std::string path = a.resume.empty() ? a.config : a.resume + "/config.yaml";
  if (!a.resume.empty() && !fs::exists(path)) {
    throw UsageError(
        fmt::format("--resume {}: not a run directory (no config.yaml in it)", a.resume));
  }
  ExperimentConfig config = load_experiment_config(path, a.overrides);
  TrialFactory factory = plugin::resolve_entrypoint(config.entrypoint, config_dir(path));
  FitOptions options;
  options.test_mode(a.test_mode).output_dir(a.output).resume_dir(a.resume).console(!a.quiet);
  Trainer(std::move(config), std::move(factory)).fit(options);
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
      std::cout << (a.command == "fit" ? kFitUsage : kCheckUsage);
      return kExitOk;
    }
    return a.command == "fit" ? fit(a) : check(a);
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
