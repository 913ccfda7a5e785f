// bench_checkpoint [--repeats N] [--batches N] [--dir DIR] [--table FILE]
//
// The cost of Crucible's checkpoints:
//  1. save and load time of a checkpoint (model, Adam state, generator states, metadata; fsynced,
//     checksummed, atomically renamed) for the Fashion-MNIST CNN and for a ~100 MB model, beside a
//     bare torch::save of the same model and optimizer into one file without fsync;
//  2. the amortised cost at the default period: `trainer fit configs/fashion_mnist_cnn.yaml` for
//     N batches (checkpoint every 500 batches as the config says, plus the one after the epoch's
//     validation and the final one), the checkpoints' time from trainer.log as a share of the
//     run's wall time.
// DIR (default: the system temp directory) is where checkpoints are written: the disk matters.
// The table rows go to FILE (bench_all).
#include <unistd.h>

#include <iostream>
#include <regex>

#include <fmt/format.h>

#include "bench_util.h"

#include "checkpoint/checkpoint.h"
#include "fashion_mnist/networks.h"

namespace fs = crucible::util;

namespace {

using bench::Clock;
using bench::median;
using bench::seconds_since;

// Four 2560x2560 layers: 26.2 M float parameters, 105 MB.
torch::nn::Sequential large_mlp() {
  namespace nn = torch::nn;
  return nn::Sequential(nn::Linear(2560, 2560), nn::ReLU(), nn::Linear(2560, 2560), nn::ReLU(),
                        nn::Linear(2560, 2560), nn::ReLU(), nn::Linear(2560, 2560));
}

// Bytes of the regular files directly in `dir` (a checkpoint has no subdirectories).
int64_t bytes_of(const std::string& dir) {
  int64_t n = 0;
  for (const auto& name : fs::list_directory(dir)) {
    n += static_cast<int64_t>(fs::file_size(fs::join(dir, name)).value_or(0));
  }
  return n;
}

struct SaveLoad {
  double save_s, load_s, bare_save_s;
  int64_t bytes;
};

// Median save and load time over `repeats` checkpoints of `model` with a stepped Adam.
template <class Net>
SaveLoad measure(Net model, torch::Tensor input, int repeats, const std::string& dir) {
  auto adam = std::make_shared<torch::optim::Adam>(model->parameters(), 1e-3);
  model->forward(input).sum().backward();
  adam->step();  // Adam's moments exist only after a step
  crucible::checkpoint::Contents contents;
  contents.models = {model.ptr()};
  contents.optimizers = {adam};
  crucible::checkpoint::Metadata meta;
  meta.batches = 1;
  meta.trial_class = "bench";
  std::vector<double> save, load, bare;
  int64_t bytes = 0;
  for (int r = 0; r < repeats; ++r) {
    const std::string run = fs::join(dir, fmt::format("run-{}", r));
    fs::create_directories(run);
    auto t = Clock::now();
    const std::string ckpt = crucible::checkpoint::save(run, 1, contents, meta);
    save.push_back(seconds_since(t));
    bytes = bytes_of(ckpt);
    t = Clock::now();
    crucible::checkpoint::load(ckpt, contents);
    load.push_back(seconds_since(t));
    t = Clock::now();
    {
      torch::serialize::OutputArchive archive;
      model->save(archive);
      torch::serialize::OutputArchive optimizer;
      adam->save(optimizer);
      archive.write("optimizer", optimizer);
      archive.save_to(fs::join(run, "bare.pt"));
    }
    bare.push_back(seconds_since(t));
    fs::remove_all(run);
  }
  return {median(save), median(load), median(bare), bytes};
}

}  // namespace

int main(int argc, char** argv) {
  int repeats = 9;
  int64_t batches = 1000;
  std::string root = fs::temp_directory(), table;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--repeats") {
      repeats = std::stoi(argv[i + 1]);
    } else if (flag == "--batches") {
      batches = std::stoll(argv[i + 1]);
    } else if (flag == "--dir") {
      root = argv[i + 1];
    } else if (flag == "--table") {
      table = argv[i + 1];
    } else {
      std::cerr << "usage: bench_checkpoint [--repeats N] [--batches N] [--dir DIR] "
                   "[--table FILE]\n";
      return 2;
    }
  }
  const std::string dir = fs::join(root, fmt::format("crucible_bench_checkpoint_{}", getpid()));
  fs::create_directories(dir);

  fmt::print(
      "checkpoint save / load, median of {} (Adam state included; save = write, fsync, "
      "CRC-32, rename)\n",
      repeats);
  fmt::print("{:<28} {:>10} {:>10} {:>10} {:>12} {:>10}\n", "model", "bytes", "save ms", "load ms",
             "save MB/s", "bare save");
  auto row = [&](const char* name, const SaveLoad& m) {
    fmt::print("{:<28} {:>10} {:>10.1f} {:>10.1f} {:>12.0f} {:>7.1f} ms\n", name, m.bytes,
               m.save_s * 1e3, m.load_s * 1e3, static_cast<double>(m.bytes) / m.save_s / 1e6,
               m.bare_save_s * 1e3);
    bench::append_row(
        table, {"bench_checkpoint", fmt::format("checkpoint save, {}", name), "ms", m.save_s * 1e3,
                "torch::save, one file, no fsync", m.bare_save_s * 1e3, false, 0});
  };
  torch::manual_seed(1);
  row("Fashion-MNIST CNN (0.42 M)",
      measure(fashion_mnist::CNN(32, 64, 128, 0.3), torch::randn({4, 1, 28, 28}), repeats, dir));
  row("MLP 4x2560^2 (26.2 M, 105 MB)", measure(large_mlp(), torch::randn({4, 2560}), repeats, dir));
  fmt::print("bare save: torch::save of the same model and optimizer into one file, no fsync\n\n");

  // Amortised: a real run of the main job at its own checkpoint period.
  const std::string run = fs::join(dir, "fit");
  const std::string command = fmt::format(
      "{}/trainer fit {}/configs/fashion_mnist_cnn.yaml --quiet --output {} "
      "--set max_length.batches={} > {}/fit.out 2>&1",
      CRUCIBLE_BIN_DIR, CRUCIBLE_SOURCE_DIR, run, batches, dir);
  const auto started = Clock::now();
  const int rc = std::system(command.c_str());
  const double wall = seconds_since(started);
  if (rc != 0) {
    std::cerr << "trainer fit failed:\n" << fs::read_file(fs::join(dir, "fit.out"));
    return 1;
  }
  const std::string log = fs::read_file(fs::join(run, "trainer.log"));
  const std::regex line(R"(\[checkpoint\] batch +(\d+) .* \(([0-9.]+)s\))");
  double in_checkpoints = 0;
  int count = 0;
  for (auto it = std::sregex_iterator(log.begin(), log.end(), line); it != std::sregex_iterator();
       ++it) {
    in_checkpoints += std::stod((*it)[2]);
    ++count;
  }
  fmt::print(
      "amortised: trainer fit configs/fashion_mnist_cnn.yaml, {} batches "
      "(min_checkpoint_period 500 batches, checkpoint_policy best)\n",
      batches);
  fmt::print(
      "  {} checkpoints took {:.3f} s of the run's {:.1f} s wall time: {:.3f}% "
      "(target <= 1%)\n",
      count, in_checkpoints, wall, 100.0 * in_checkpoints / wall);
  bench::append_row(
      table, {"bench_checkpoint", fmt::format("checkpoints' share of a {}-batch CNN run", batches),
              "%", 100.0 * in_checkpoints / wall, "", 0, false, 1.0});
  fs::remove_all(dir);
  return 0;
}
