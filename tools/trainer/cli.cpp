#include "cli.h"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <optional>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <torch/version.h>

#include <crucible/crucible.h>

namespace crucible::cli {

namespace {

constexpr const char* kUsage = R"(usage: trainer <command> [options]

Commands:
  fit CONFIG                  train the trial an experiment file describes
  check CONFIG                validate an experiment file, load its trial, print the resolved config
  validate --checkpoint DIR   run the trial's validation on a checkpoint, print the metrics
  predict --checkpoint DIR    write the trial's predictions over its predict data to a file
  report DIR                  write an HTML report of a run or an experiment (DIR/report.html)
  keys                        list the experiment file's keys with their defaults

Options:
  --help           show help (also `trainer <command> --help`)
  --version        print the Crucible and LibTorch versions

Exit codes: 0 done, 1 training failed, 2 bad usage or config, 3 trial library or trial class,
4 stopped by SIGTERM/SIGUSR1/SIGINT/SIGHUP or a closed console after a checkpoint (continue
with --resume), 5 another rank died, hangs or is unreachable (the launcher names it), 6 the
trial rejected its hyperparameters (InvalidHyperparameters), 130 a second SIGINT (stopped at
once), 128+N crashed with signal N after reporting where (139 SIGSEGV, 134 SIGABRT).
)";

constexpr const char* kFitUsage = R"(usage: trainer fit CONFIG [options]
       trainer fit --resume RUN_DIR [options]

Trains the trial of experiment file CONFIG and writes a run directory
<checkpoint_storage.host_path>/<name>/<run-id>/ holding config.yaml, trainer.log, metrics.jsonl
and checkpoints/.

With searcher grid, random or adaptive_asha it runs a search instead: an experiment directory
holding config.yaml, experiment.log, experiment.jsonl, best and trials/<id>/ (each a run
directory), one `trainer fit` process per trial on this machine's cores (or GPUs), and a table
of the trials at the end. `--resume EXPERIMENT_DIR` continues a stopped or killed search.

Options:
  --test-mode        train 1 batch, validate 1 batch, save a checkpoint and load it back
  --set KEY=VALUE    override a config key (dotted path, value typed by YAML); repeatable
  --output DIR       write the run into DIR instead of a new run directory
  --resume RUN_DIR   continue RUN_DIR from its newest good checkpoint with its config.yaml;
                     --set changes to it are refused unless safe and --allow-safe-changes
  --allow-safe-changes
                     with --resume: accept changes to the keys `trainer keys` marks safe
                     (periods, reporting, retention, profiling) or, for a run, run (its
                     length); they stay accepted
  --warm-start CKPT  start a new run from the model weights of checkpoint CKPT (or of a run's
                     newest, or an experiment's best: as validate's --checkpoint)
  --slots N          train on N processes of this machine (resources.slots_per_trial)
  --nnodes N, --node-rank R, --master-addr HOST, --master-port PORT
                     a run over N machines: start `trainer fit` on each, with its rank;
                     each runs slots_per_trial / N workers; node 0 serves the rendezvous
                     at HOST:PORT
  --quiet            write reports to the run's log only (warnings still go to stderr)
  --help             show this help

Trial libraries named in `entrypoint` are looked up in $CRUCIBLE_TRIAL_PATH, the config's
directory, the trainer's directory and <prefix>/lib/crucible/trials.

Distributed: with slots_per_trial > 1 `trainer fit` starts one worker per slot, prefixes their
output with [rank R] and stops them all when one fails. Under torchrun, mpirun or srun each
process joins the run their variables describe instead. resources.distributed_timeout_seconds
(default 300; $CRUCIBLE_DIST_TIMEOUT overrides it) bounds every wait for another rank.
)";

constexpr const char* kValidateUsage = R"(usage: trainer validate --checkpoint DIR [--slots N]

Restores checkpoint DIR (a run's checkpoints/batch-<N>) with the config it was written with,
runs the trial's validation and prints the reduced metrics as JSON. DIR may also be a run
directory or its latest file (its newest good checkpoint), or an experiment directory or its
best file (the search's best checkpoint). A checkpoint of a run on any
number of slots evaluates in one process; --slots N shares the batches between N processes of
this machine (N must divide global_batch_size). Under torchrun, mpirun or srun each process
joins the evaluation their variables describe instead.
)";

constexpr const char* kPredictUsage =
    R"(usage: trainer predict --checkpoint DIR [--output FILE] [--slots N]

Restores checkpoint DIR (as for validate), runs the trial's predict_batch over build_predict_data_loader() (by
default the validation data) and writes {"predictions": tensor} to FILE (default
predictions.pt; never a file of a run or an experiment), readable with torch.load in Python and
torch::pickle_load in C++. --slots N
shares the batches between N processes, as for validate; the rows keep the loader's order.
)";

constexpr const char* kCheckUsage = R"(usage: trainer check CONFIG [--set KEY=VALUE]...

Validates CONFIG, loads its trial library and finds the trial class, then prints the resolved
configuration (every default spelled out) as YAML. Exit code 0 when all is well.
)";

constexpr const char* kReportUsage = R"(usage: trainer report DIR [--output FILE]

Writes DIR/report.html (or FILE): one self-contained HTML page of the run or experiment directory
DIR that opens offline in any browser (charts as inline SVG, no scripts). A run's page shows how it
ended, each metric over training (training and validation together), the validations with the
best marked, the checkpoints, the profiler's phases and the config. An experiment's page ranks the
trials by searcher.metric, draws every trial's metric over its length and the metric against each
hyperparameter, counts ASHA's rungs and lists the events; each trial's run gets its own page,
trials/<id>/report.html. A run or search still running, or killed, is reported as far as its
files go. Nothing in DIR changes but the pages.
)";

constexpr const char* kKeysUsage = R"(usage: trainer keys

Lists every key of the experiment file: its default (or "required"), whether it may change on
--resume with --allow-safe-changes ("safe": of a run or a search; "run": of a run only), and what
it does.
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
  std::string master_addr;
  int master_port = 0;
  bool allow_safe_changes = false;
  bool test_mode = false;
  bool quiet = false;
  bool help = false;
};

// `text` as an integer from `min` to `max`, or a UsageError naming `flag`.
int64_t positive(const std::string& text, const std::string& flag, int64_t min = 1,
                 int64_t max = std::numeric_limits<int64_t>::max()) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno != 0 || v < min || v > max) {
    throw UsageError(
        max == std::numeric_limits<int64_t>::max()
            ? fmt::format("{} {}: expected an integer of at least {}", flag, text, min)
            : fmt::format("{} {}: expected an integer from {} to {}", flag, text, min, max));
  }
  return v;
}

Args parse(const std::vector<std::string>& args) {
  Args a;
  std::set<std::string> given;  // the options with a value seen so far, but --set
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    // The option's value: after '=' or the next argument, which may not be empty (an unset
    // shell variable) nor, unless given after '=', another option.
    auto value = [&](const std::string& flag) -> std::string {
      if (flag != "--set" && !given.insert(flag).second) {
        throw UsageError(fmt::format("{} is given twice; give it once", flag));
      }
      const auto eq = arg.find('=');
      std::string v;
      if (eq != std::string::npos && arg.rfind("--", 0) == 0) {
        v = arg.substr(eq + 1);
      } else {
        if (i + 1 >= args.size()) throw UsageError(flag + " needs a value");
        v = args[++i];
        if (v.rfind("--", 0) == 0) {
          throw UsageError(fmt::format(
              "{} needs a value, and '{}' is an option; a value that starts with -- is written "
              "{}={}",
              flag, v, flag, v));
        }
      }
      if (v.empty()) throw UsageError(flag + " needs a value, and it is empty");
      return v;
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
    } else if (flag == "--set" && (a.command == "fit" || a.command == "check")) {
      a.overrides.push_back(value("--set"));
      // `--set KEY VALUE`: the value given as an argument of its own.
      if (a.overrides.back().find('=') == std::string::npos && i + 1 < args.size() &&
          args[i + 1].rfind("-", 0) != 0) {
        throw UsageError(fmt::format("--set takes KEY=VALUE as one argument: --set {}={}",
                                     a.overrides.back(), args[i + 1]));
      }
    } else if (flag == "--output" &&
               (a.command == "fit" || a.command == "predict" || a.command == "report")) {
      a.output = value("--output");
    } else if (flag == "--resume" && a.command == "fit") {
      a.resume = value("--resume");
    } else if (flag == "--slots" &&
               (a.command == "fit" || a.command == "validate" || a.command == "predict")) {
      a.slots = positive(value("--slots"), "--slots");
    } else if (flag == "--nnodes" && a.command == "fit") {
      a.nnodes = positive(value("--nnodes"), "--nnodes");
    } else if (flag == "--node-rank" && a.command == "fit") {
      a.node_rank = positive(value("--node-rank"), "--node-rank", 0);
    } else if (flag == "--master-addr" && a.command == "fit") {
      a.master_addr = value("--master-addr");
    } else if (flag == "--master-port" && a.command == "fit") {
      a.master_port = static_cast<int>(positive(value("--master-port"), "--master-port", 1, 65535));
    } else if (arg.rfind("-", 0) == 0) {
      throw UsageError(fmt::format("unknown option '{}'{}; see `trainer {}--help`", arg,
                                   a.command.empty() ? "" : " for " + a.command,
                                   a.command.empty() ? "" : a.command + " "));
    } else if (a.command.empty()) {
      if (arg != "fit" && arg != "check" && arg != "validate" && arg != "predict" &&
          arg != "report" && arg != "keys") {
        throw UsageError(fmt::format(
            "unknown command '{}'; commands: fit, check, validate, predict, report, keys", arg));
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

int fit(const Args& a) {
  ExperimentOptions options;
  options.config_file(a.config)
      .overrides(a.overrides)
      .slots(a.slots)
      .nnodes(a.nnodes)
      .node_rank(a.node_rank)
      .master_addr(a.master_addr)
      .master_port(a.master_port);
  options.fit()
      .test_mode(a.test_mode)
      .output_dir(a.output)
      .resume_dir(a.resume)
      .console(!a.quiet)
      .allow_safe_changes(a.allow_safe_changes)
      .warm_start(a.warm_start);
  const ExperimentResult result = run_experiment(options);
  if (!result.failure.empty()) std::cerr << "error: " << result.failure << "\n";
  return result.exit_code;
}

EvaluationOptions evaluation_options(const Args& a) {
  if (a.checkpoint.empty()) throw UsageError("--checkpoint DIR is required");
  EvaluationOptions options;
  options.checkpoint(a.checkpoint).slots(a.slots);
  if (!a.output.empty()) options.predictions_file(a.output);
  return options;
}

// Prints a launched worker's failure; returns the exit code.
int finish(const EvaluationResult& result) {
  if (!result.failure.empty()) std::cerr << "error: " << result.failure << "\n";
  return result.exit_code;
}

int validate(const Args& a) {
  const EvaluationResult result = run_validation(evaluation_options(a));
  if (result.metrics) std::cout << metrics_json(*result.metrics).dump(2) << "\n";
  return finish(result);
}

int predict(const Args& a) {
  const EvaluationOptions options = evaluation_options(a);
  const EvaluationResult result = run_prediction(options);
  if (result.predictions) {
    std::cout << "wrote " << *result.predictions << " predictions to " << options.predictions_file()
              << "\n";
  }
  return finish(result);
}

int check(const Args& a) {
  if (a.config.empty()) throw UsageError("trainer check needs a CONFIG file");
  ExperimentConfig config = load_experiment_config(a.config, a.overrides);
  for (const std::string& warning : config.warnings) std::cerr << "warning: " << warning << "\n";
  const TrialFactory factory = check_experiment(config);
  const std::string search = describe_search(config);  // before "OK": it may refuse too
  std::cout << "# " << a.config << ": OK (trial " << factory.name << ")\n";
  std::istringstream lines(search);
  for (std::string line, lead = "# search "; std::getline(lines, line); lead = "# ") {
    std::cout << lead << line << "\n";
  }
  std::cout << to_yaml(config);
  return kExitOk;
}

int report(const Args& a) {
  const ReportResult result = write_report(ReportOptions().dir(a.config).output(a.output));
  for (const std::string& page : result.pages) std::cout << "wrote " << page << "\n";
  std::cout << result.status << "\n";
  return kExitOk;
}

int keys() {
  const std::vector<ConfigKey> keys = config_keys();
  size_t path_width = 3, default_width = 8;  // "required"
  for (const ConfigKey& key : keys) {
    path_width = std::max(path_width, key.path.size());
    default_width = std::max(default_width, key.default_value.size());
  }
  std::cout << fmt::format("{:<{}}  {:<{}}  {:<6}  {}\n", "KEY", path_width, "DEFAULT",
                           default_width, "RESUME", "DESCRIPTION");
  for (const ConfigKey& key : keys) {
    std::cout << fmt::format("{:<{}}  {:<{}}  {:<6}  {}\n", key.path, path_width,
                             key.required ? "required" : key.default_value, default_width,
                             key.safe_on_search_resume ? "safe"
                             : key.safe_on_resume      ? "run"
                                                       : "-",
                             key.description);
  }
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
                    : a.command == "keys"     ? kKeysUsage
                    : a.command == "report"   ? kReportUsage
                                              : kPredictUsage);
      return kExitOk;
    }
    if (a.command == "fit") return fit(a);
    if (a.command == "check") return check(a);
    if (a.command == "report") return report(a);
    if (!a.config.empty()) {
      throw UsageError(fmt::format("unexpected argument '{}'; trainer {} takes {}", a.config,
                                   a.command,
                                   a.command == "keys" ? "no CONFIG"
                                                       : "no CONFIG: its checkpoint's config is "
                                                         "used (--checkpoint CKPT)"));
    }
    if (a.command == "keys") return keys();
    return a.command == "validate" ? validate(a) : predict(a);
  } catch (const Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return e.exit_code();
  } catch (const std::exception& e) {
    std::cerr << "error: " << message_without_trace(e) << "\n";
    return kExitTrainingFailed;
  } catch (...) {
    // Crucible names the trial method that threw such a value; this is the last resort.
    std::cerr << "error: a thrown value that is not a std::exception ended the command\n";
    return kExitTrainingFailed;
  }
}

}  // namespace crucible::cli
