// bench_gpu [--config FILE] [--epochs N] [--rounds R] [--python PYTHON] [--table FILE]
//
// The Fashion-MNIST CNN job (configs/fashion_mnist_cnn.yaml: its hyperparameters, epochs and
// data) run four ways on this machine's first GPU, or on the CPU where there is none:
//   1. `trainer fit` of the config, which also validates every epoch and writes its checkpoints;
//   2. a hand-written LibTorch loop (this program with --loop): the same network, Adam, per-epoch
//      StepLR, batch size, seed and data, validating every epoch, without checkpoints;
//   3. the same loop in plain PyTorch (fashion_cnn_pytorch.py);
//   4. the same in PyTorch Lightning, when the Python has it.
// Every run is a fresh process, all with the same OMP_NUM_THREADS (LibTorch's intra-op thread
// count unless set), and its wall time is the whole process's (start-up, data loading and the
// CUDA context included). Prints the median over rounds of wall time, training steps per
// second of wall time and test accuracy of each, and each wall time's ratio to the hand-written
// loop's, then where the two C++ runners' time went in the last round (trainer fit's own account
// from its log; the loop's training and validation seconds, and the rest); appends trainer fit's
// wall time beside each other runner's to FILE (bench_all).
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <iostream>
#include <optional>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <crucible/config.h>

#include "bench_util.h"
#include "fashion_mnist/idx.h"
#include "fashion_mnist/networks.h"

namespace fs = crucible::util;

namespace {

// What the four runners share, from the experiment file.
struct Job {
  std::string data;
  int64_t epochs = 0, batch = 0, filters1 = 0, filters2 = 0, hidden = 0, seed = 0;
  double lr = 0, lr_decay = 0, dropout = 0;

  static Job from_config(const crucible::ExperimentConfig& config, int64_t epochs) {
    const nlohmann::json h = config.constant_hyperparameters();
    Job job;
    job.data = config.data.value("path", "/usr/share/datasets/fashion-mnist");
    job.epochs = epochs;
    job.batch = config.global_batch_size();
    job.filters1 = h.at("filters1");
    job.filters2 = h.at("filters2");
    job.hidden = h.at("hidden");
    job.seed = static_cast<int64_t>(config.reproducibility.experiment_seed.value_or(0));
    job.lr = h.at("lr");
    job.lr_decay = h.at("lr_decay");
    job.dropout = h.at("dropout");
    return job;
  }

  // The command-line form both --loop and fashion_cnn_pytorch.py read.
  std::string args() const {
    return fmt::format(
        "--data {} --epochs {} --batch {} --lr {} --lr-decay {} --filters1 {} --filters2 {} "
        "--hidden {} --dropout {} --seed {}",
        data, epochs, batch, lr, lr_decay, filters1, filters2, hidden, dropout, seed);
  }

  static Job from_args(int argc, char** argv) {
    Job job;
    for (int i = 2; i + 1 < argc; i += 2) {
      const std::string flag = argv[i], value = argv[i + 1];
      if (flag == "--data")
        job.data = value;
      else if (flag == "--epochs")
        job.epochs = std::stoll(value);
      else if (flag == "--batch")
        job.batch = std::stoll(value);
      else if (flag == "--lr")
        job.lr = std::stod(value);
      else if (flag == "--lr-decay")
        job.lr_decay = std::stod(value);
      else if (flag == "--filters1")
        job.filters1 = std::stoll(value);
      else if (flag == "--filters2")
        job.filters2 = std::stoll(value);
      else if (flag == "--hidden")
        job.hidden = std::stoll(value);
      else if (flag == "--dropout")
        job.dropout = std::stod(value);
      else if (flag == "--seed")
        job.seed = std::stoll(value);
      else
        throw std::invalid_argument("bench_gpu --loop: unknown flag " + flag);
    }
    return job;
  }
};

double test_accuracy(fashion_mnist::CNN& model, const torch::Tensor& x, const torch::Tensor& y,
                     const torch::Device& device) {
  torch::NoGradGuard no_grad;
  model->eval();
  int64_t correct = 0;
  for (int64_t start = 0; start < x.size(0); start += 1000) {
    const auto logits = model->forward(x.slice(0, start, start + 1000).to(device));
    correct +=
        logits.argmax(1).eq(y.slice(0, start, start + 1000).to(device)).sum().item<int64_t>();
  }
  model->train();
  return static_cast<double>(correct) / static_cast<double>(x.size(0));
}

// The hand-written LibTorch loop. Prints "RESULT <steps> <accuracy> <training s> <validation s>",
// the last two the time in its training and its validation loops (on CUDA, each ending when the
// device has done their work).
int hand_written_loop(const Job& job) {
  torch::manual_seed(static_cast<uint64_t>(job.seed));
  const torch::Device device =
      torch::cuda::is_available() ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
  const auto [x, y] = fashion_mnist::load_split(job.data, "train");
  const auto [test_x, test_y] = fashion_mnist::load_split(job.data, "t10k");
  fashion_mnist::CNN model(job.filters1, job.filters2, job.hidden, job.dropout);
  model->to(device);
  torch::optim::Adam adam(model->parameters(), torch::optim::AdamOptions(job.lr));
  torch::optim::StepLR decay(adam, 1, job.lr_decay);
  const int64_t n = x.size(0);
  int64_t steps = 0;
  double accuracy = 0, training_s = 0, validation_s = 0;
  const auto seconds_since = [&](std::chrono::steady_clock::time_point since) {
    if (device.is_cuda()) torch::cuda::synchronize();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
  };
  for (int64_t epoch = 0; epoch < job.epochs; ++epoch) {
    const auto training_started = std::chrono::steady_clock::now();
    const auto perm = torch::randperm(n, torch::kLong);
    for (int64_t start = 0; start < n; start += job.batch) {
      const auto idx = perm.slice(0, start, start + job.batch);
      const auto loss = torch::nn::functional::cross_entropy(
          model->forward(x.index_select(0, idx).to(device)), y.index_select(0, idx).to(device));
      adam.zero_grad();
      loss.backward();
      adam.step();
      ++steps;
    }
    decay.step();
    training_s += seconds_since(training_started);
    const auto validation_started = std::chrono::steady_clock::now();
    accuracy = test_accuracy(model, test_x, test_y, device);
    validation_s += seconds_since(validation_started);
  }
  fmt::print("RESULT {} {:.4f} {:.3f} {:.3f}\n", steps, accuracy, training_s, validation_s);
  return 0;
}

struct Result {
  double wall_s = 0;
  int64_t steps = 0;
  double accuracy = 0;
  // Where the time went: the hand-written loop's training and validation seconds; trainer fit's
  // own account, the "this process:" line of its log.
  double training_s = 0, validation_s = 0;
  std::string account;
};

// Runs `command`; returns its wall time and, when `expect_result`, the steps and accuracy of the
// last "RESULT <steps> <accuracy>" line it printed. Returns nothing, with the command's output
// on stderr, when it failed or printed no such line. A runner exiting 3 is absent (Lightning not
// installed): `*absent` is set and nothing is printed.
std::optional<Result> timed(const std::string& command, bool expect_result,
                            bool* absent = nullptr) {
  const auto started = std::chrono::steady_clock::now();
  int status = 0;
  const std::string out = bench::capture(command + " 2>&1", &status);
  Result r;
  r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  if (absent && WIFEXITED(status) && WEXITSTATUS(status) == 3) {
    *absent = true;
    return std::nullopt;
  }
  const auto at = out.rfind("RESULT ");
  const auto numbers =
      at == std::string::npos ? std::vector<double>{} : bench::read_numbers(out.substr(at + 7));
  if (status != 0 || (expect_result && numbers.size() < 2)) {
    std::cerr << command << " failed:\n" << out << '\n';
    return std::nullopt;
  }
  if (expect_result) {
    r.steps = static_cast<int64_t>(numbers[0]);
    r.accuracy = numbers[1];
    if (numbers.size() >= 4) {
      r.training_s = numbers[2];
      r.validation_s = numbers[3];
    }
  }
  return r;
}

// `trainer fit` of the config; steps and accuracy from the run's metrics.jsonl.
std::optional<Result> trainer_fit(const std::string& config, int64_t epochs,
                                  const std::string& run) {
  auto r = timed(fmt::format("{}/trainer fit {} --quiet --output {} --set max_length.epochs={}",
                             CRUCIBLE_BIN_DIR, config, run, epochs),
                 /*expect_result=*/false);
  if (!r) {
    fs::remove_all(run);
    return r;
  }
  std::ifstream log(fs::join(run, "trainer.log"));
  for (std::string line; std::getline(log, line);) {
    const auto at = line.find("this process: ");
    if (at != std::string::npos) r->account = line.substr(at);
  }
  std::ifstream in(fs::join(run, "metrics.jsonl"));
  for (std::string line; std::getline(in, line);) {
    const auto row = nlohmann::json::parse(line, nullptr, false);
    if (row.is_discarded() || row.value("type", "") != "validation") continue;
    r->steps = row.value("batches", int64_t{0});
    r->accuracy = row["metrics"].value("validation_accuracy", 0.0);
  }
  fs::remove_all(run);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "--loop") {
    return hand_written_loop(Job::from_args(argc, argv));
  }
  std::string config = fmt::format("{}/configs/fashion_mnist_cnn.yaml", CRUCIBLE_SOURCE_DIR);
  std::string python = CRUCIBLE_PYTHON, table;
  std::optional<int64_t> epochs;
  int rounds = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--config")
      config = argv[i + 1];
    else if (flag == "--epochs")
      epochs = std::stoll(argv[i + 1]);
    else if (flag == "--rounds")
      rounds = std::stoi(argv[i + 1]);
    else if (flag == "--python")
      python = argv[i + 1];
    else if (flag == "--table")
      table = argv[i + 1];
    else {
      std::cerr << "usage: bench_gpu [--config FILE] [--epochs N] [--rounds R] [--python PYTHON] "
                   "[--table FILE]\n";
      return 2;
    }
  }
  const crucible::ExperimentConfig parsed = crucible::load_experiment_config(config);
  if (!epochs) {
    if (parsed.max_length.unit != crucible::LengthUnit::kEpochs) {
      std::cerr << config << ": max_length is " << parsed.max_length.str() << "; give --epochs N\n";
      return 2;
    }
    epochs = parsed.max_length.value;
  }
  const Job job = Job::from_config(parsed, *epochs);
  const std::string threads = bench::pin_threads(torch::get_num_threads());
  const std::string run =
      fs::join(fs::temp_directory(), fmt::format("crucible_bench_gpu_{}", getpid()));
  const std::string script = fmt::format("{}/fashion_cnn_pytorch.py", CRUCIBLE_BENCH_DIR);

  struct Runner {
    std::string name;
    std::vector<Result> results;
    bool absent = false;
  };
  std::vector<Runner> runners;
  for (const char* name : {"Crucible trainer fit (+ckpt)", "hand-written LibTorch loop",
                           "plain PyTorch loop", "PyTorch Lightning"}) {
    runners.push_back(Runner{name, {}, false});
  }
  // Rounds interleave the runners so that drift of the machine hits all of them alike.
  for (int round = 0; round < rounds; ++round) {
    std::optional<Result> r[4] = {
        trainer_fit(config, *epochs, run),
        timed(fmt::format("{} --loop {}", argv[0], job.args()), true),
        timed(fmt::format("{} {} {}", python, script, job.args()), true),
        timed(fmt::format("{} {} --lightning {}", python, script, job.args()), true,
              &runners[3].absent)};
    for (int i = 0; i < 4; ++i) {
      if (r[i])
        runners[i].results.push_back(*r[i]);
      else if (!runners[i].absent && i < 2)
        return 1;  // ours must run
    }
  }

  const torch::Device device =
      torch::cuda::is_available() ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
  fmt::print(
      "Fashion-MNIST CNN ({}), {} epochs of batch {}, on {}, OMP_NUM_THREADS={}; LibTorch {}; {} "
      "round(s)\n",
      config, *epochs, job.batch, device.is_cuda() ? "CUDA device 0" : "the CPU", threads,
      TORCH_VERSION, rounds);
  fmt::print("median over rounds; whole-process wall time; ratio = wall time / hand-written's\n");
  fmt::print("{:<28} {:>10} {:>9} {:>10} {:>8} {:>7}\n", "runner", "wall s", "steps", "steps/s",
             "test acc", "ratio");
  auto median_of = [](const std::vector<Result>& v, auto field) {
    std::vector<double> x;
    for (const auto& r : v) x.push_back(static_cast<double>(r.*field));
    return bench::median(x);
  };
  const double hand_wall = median_of(runners[1].results, &Result::wall_s);
  for (const auto& runner : runners) {
    if (runner.results.empty()) {
      fmt::print("{:<28} {}\n", runner.name,
                 runner.absent ? "skipped: the Python has no lightning or pytorch_lightning"
                               : fmt::format("failed ({} has torch?)", python));
      continue;
    }
    const double wall = median_of(runner.results, &Result::wall_s);
    const double steps = median_of(runner.results, &Result::steps);
    fmt::print("{:<28} {:>10.1f} {:>9.0f} {:>10.1f} {:>8.4f} {:>7.2f}\n", runner.name, wall, steps,
               steps / wall, median_of(runner.results, &Result::accuracy), wall / hand_wall);
  }
  // The last round's account of where each C++ runner's time went.
  fmt::print("where the time went, last round:\n");
  if (!runners[0].results.empty()) {
    const Result& fit = runners[0].results.back();
    fmt::print("  trainer fit, {:.1f} s in all; {}\n", fit.wall_s, fit.account);
  }
  if (!runners[1].results.empty()) {
    const Result& loop = runners[1].results.back();
    fmt::print(
        "  hand-written loop, {:.1f} s in all; training {:.1f} s, validation {:.1f} s, the rest "
        "(start-up, data loading, exit) {:.1f} s\n",
        loop.wall_s, loop.training_s, loop.validation_s,
        loop.wall_s - loop.training_s - loop.validation_s);
  }
  // Goals: parity with the hand-written loop (within 5%), ahead of the Python runners.
  const double fit_wall = median_of(runners[0].results, &Result::wall_s);
  const std::string measure =
      fmt::format("Fashion-MNIST CNN job, {} epoch(s), whole process, {}: trainer fit", *epochs,
                  device.is_cuda() ? "CUDA" : "CPU");
  for (size_t i = 1; i < runners.size(); ++i) {
    if (runners[i].results.empty()) continue;
    bench::append_row(table,
                      {"bench_gpu", measure, "s", fit_wall, runners[i].name,
                       median_of(runners[i].results, &Result::wall_s), false, i == 1 ? 0.95 : 1.0});
  }
  return 0;
}
