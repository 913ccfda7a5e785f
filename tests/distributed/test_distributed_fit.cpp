// `trainer fit` over several processes: the built-in launcher, equivalence with one process,
// failures that name the rank, and exact resume of a distributed run.
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <regex>
#include <sstream>

#include <fmt/format.h>
#include "catch.h"

#include <crucible/errors.h>

#include "distributed/backend.h"
#include "distributed/c10d_compat.h"
#include "free_port.h"
#include "resumable_run.h"
#include "slurm_cluster.h"
#include "text.h"
#include "torchrun_env.h"

using namespace crucible::testing;

namespace {

const std::string kLinear = std::string(CRUCIBLE_SOURCE_DIR) + "/configs/linear.yaml";

nlohmann::json final_validation(const std::string& run) {
  const auto rows = read_metrics(run + "/metrics.jsonl");
  REQUIRE(!rows.empty());
  REQUIRE(rows.back()["type"] == "validation");
  return rows.back()["metrics"];
}

// The training reports of `run`, in order.
std::vector<nlohmann::json> training_rows(const std::string& run) {
  std::vector<nlohmann::json> out;
  for (auto& row : read_metrics(run + "/metrics.jsonl")) {
    if (row["type"] == "training") out.push_back(std::move(row));
  }
  return out;
}

// Fits the linear trial on `slots` processes; returns its final validation metrics.
nlohmann::json fit_linear(const TempDir& tmp, int slots, const std::string& sets) {
  static int runs = 0;
  const std::string run = tmp / fmt::format("run{}-{}", slots, runs++);
  auto r = run_command(kTrainer + " fit " + kLinear + " --quiet --output " + run + " --slots " +
                       std::to_string(slots) + " " + sets);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  return final_validation(run);
}

// Fits experiment file `config` into `run` on `slots` processes, with trainer arguments `args`.
CommandResult fit_slots(const std::string& config, const std::string& run, int slots,
                        const std::string& args = "") {
  return run_command(kTrainer + " fit " + config + " --quiet --output " + run + " --slots " +
                     std::to_string(slots) + args);
}

// fit_slots, required to succeed.
void fitted(const std::string& config, const std::string& run, int slots,
            const std::string& args = "") {
  const auto r = fit_slots(config, run, slots, args);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
}

// Continues `run` with `trainer fit --resume` until `batches` batches, required to succeed.
void resumed_to(const std::string& run, int64_t batches) {
  const auto r = run_command(kTrainer + " fit --resume " + run + " --set max_length.batches=" +
                             std::to_string(batches) + " --allow-safe-changes --quiet");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
}

// Writes `yaml` as an experiment file in `tmp` and fits it into tmp/run.
CommandResult fit_yaml(const TempDir& tmp, const std::string& yaml) {
  const std::string config = tmp / "experiment.yaml";
  write_file(config, yaml);
  return run_command(kTrainer + " fit " + config + " --output " + (tmp / "run"));
}

// A socket listening on the IPv4 wildcard address of `port` that accepts no connection until
// go_away() (the kernel completes up to 5 handshakes); closed when destroyed.
class PortListener {
 public:
  explicit PortListener(int port) : fd_(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    REQUIRE(fd_ >= 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    REQUIRE(::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
    REQUIRE(::listen(fd_, 4) == 0);
  }
  ~PortListener() {
    if (fd_ >= 0) ::close(fd_);
  }
  PortListener(const PortListener&) = delete;
  PortListener& operator=(const PortListener&) = delete;

  // Waits up to `limit` for a handshake to complete; returns whether one did.
  bool reached(std::chrono::milliseconds limit) const {
    pollfd waiting{fd_, POLLIN, 0};
    return ::poll(&waiting, 1, static_cast<int>(limit.count())) == 1;
  }

  // Accepts every connection the kernel completed, reads what each sent and closes it (with a
  // FIN, nothing being left unread: a reset would end a LibTorch 1.x store client's process),
  // then stops listening: later connects are refused.
  void go_away() {
    REQUIRE(::fcntl(fd_, F_SETFL, O_NONBLOCK) == 0);
    for (int c; (c = ::accept4(fd_, nullptr, nullptr, SOCK_NONBLOCK)) >= 0;) {
      char sent[4096];
      while (::read(c, sent, sizeof sent) > 0) {
      }
      ::close(c);
    }
    ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_;
};

}  // namespace

TEST_CASE("N slots of batch B train to the weights of 1 slot of batch N x B", "[dist][fit]") {
  TempDir tmp;
  for (int slots : {2, 3}) {
    INFO(slots << " slots");
    // 1980 records = 60 global batches of 33 or 62 (and a short one) of 32.
    const std::string sets = fmt::format(
        "--set hyperparameters.global_batch_size={} --set hyperparameters.train_samples=1980",
        slots == 2 ? 32 : 33);
    const auto one = fit_linear(tmp, 1, sets);
    const auto many = fit_linear(tmp, slots, sets);
    for (const char* key : {"validation_weight", "validation_bias", "validation_loss"}) {
      INFO(key);
      CHECK(many[key].get<double>() == Approx(one[key].get<double>()).epsilon(1e-5));
    }
    CHECK(many["validation_weight"].get<double>() == Approx(2.5).margin(0.02));
  }
}

TEST_CASE("mpirun and srun and torchrun's environment and two nodes run the same 2-slot fit",
          "[dist][fit]") {
  TempDir tmp;
  const std::string sets =
      "--set hyperparameters.global_batch_size=32 --set hyperparameters.train_samples=1980";
  // Catch runs the test case once per section: the reference run is made once.
  static const nlohmann::json builtin = [&] {
    TempDir dir;
    return fit_linear(dir, 2, sets);
  }();
  const std::string run = tmp / "run";
  // configs/linear.yaml has slots_per_trial 1: an outside launcher's 2 processes decide.
  const std::string adopting =
      fmt::format("{} fit {} --quiet --output {} {}", kTrainer, kLinear, run, sets);
  const std::string fit = adopting + " --slots 2";
  // Rank 0 says once that the launcher's count wins; the run's config records it.
  auto check_adopted = [&](const std::string& output, const std::string& launcher) {
    const std::string line = launcher +
                             " started 2 processes: training on 2 slots (the experiment file's "
                             "resources.slots_per_trial is 1; the run's config.yaml records 2)";
    CHECK_THAT(output, Catch::Contains(line));
    CHECK(output.find(line) == output.rfind(line));
    CHECK_THAT(read_file(run + "/config.yaml"), Catch::Contains("slots_per_trial: 2"));
  };
  SECTION("mpirun -n 2 (Open MPI), adopting its 2 processes") {
    auto r = run_command(
        fmt::format("mpirun --allow-run-as-root --oversubscribe -n 2 {} 2>&1", adopting));
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    check_adopted(r.output, "Open MPI");
  }
  SECTION("srun -n 2 (Slurm, a one-node cluster of this machine), adopting its 2 processes") {
    const SlurmCluster cluster(tmp / "slurm");
    // Slurm gives no thread count: one each, as the 2-slot launcher gives on this machine.
    auto r = run_command(
        fmt::format("{} MASTER_PORT={} OMP_NUM_THREADS=1 srun --kill-on-bad-exit=1 -n 2 {} 2>&1",
                    cluster.env(), free_port(), adopting));
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    check_adopted(r.output, "Slurm");
  }
  SECTION("two nodes on loopback: a built-in launcher each (--nnodes 2)") {
    const int port = free_port();
    std::vector<std::unique_ptr<Child>> nodes;
    for (int node = 0; node < 2; ++node) {
      // One worker per node; one thread each, as the 2-slot launcher gives on this machine.
      // Both "nodes" are this machine and share its GPUs, which NCCL refuses: Gloo, as the
      // 2-slot run of one launcher chooses on a machine of fewer GPUs than slots.
      nodes.push_back(std::make_unique<Child>(
          fmt::format("OMP_NUM_THREADS=1 {} --nnodes 2 --node-rank {} --master-addr 127.0.0.1 "
                      "--master-port {} --set resources.distributed_backend=gloo",
                      fit, node, port),
          tmp / fmt::format("node{}.log", node)));
    }
    for (int node = 0; node < 2; ++node) {
      INFO(read_file(tmp / fmt::format("node{}.log", node)));
      REQUIRE(nodes[static_cast<size_t>(node)]->wait() == 0);
    }
  }
  // Debian's torchrun cannot start under Python 3.11, so its workers' environment is set here
  // exactly as its agent sets it.
  for (const bool agent_store : {true, false}) {
    DYNAMIC_SECTION("torchrun's variables, " << (agent_store ? "agent" : "rank 0") << " serves") {
      c10::intrusive_ptr<c10d::TCPStore> store;  // torchrun's agent, serving the store
      int port = free_port();
      if (agent_store) {
        c10d::TCPStoreOptions options;
        options.port = 0;
        options.isServer = true;
        options.waitWorkers = false;
        store = crucible::dist::open_tcp_store("127.0.0.1", options);
        port = store->getPort();
      }
      // With the agent's store the file's slot count is adopted; without it --slots agrees.
      std::vector<std::unique_ptr<Child>> workers;
      for (int rank = 0; rank < 2; ++rank) {
        workers.push_back(std::make_unique<Child>(
            torchrun_env(rank, 2, port, agent_store) + " " + (agent_store ? adopting : fit),
            tmp / fmt::format("rank{}.log", rank)));
      }
      for (int rank = 0; rank < 2; ++rank) {
        INFO(read_file(tmp / fmt::format("rank{}.log", rank)));
        REQUIRE(workers[static_cast<size_t>(rank)]->wait() == 0);
      }
      if (agent_store) {
        check_adopted(read_file(tmp / "rank0.log") + read_file(tmp / "rank1.log"), "torchrun");
      }
    }
  }
  // The same processes computing the same thing: bitwise the same metrics.
  CHECK(final_validation(run) == builtin);
}

TEST_CASE("nodes started with other configs or slot counts are refused at once, naming it",
          "[dist][fit]") {
  TempDir tmp;
  // Two launchers as two nodes of 2 slots, both given `both_args`, node 1's `node1_slots` and
  // `node1_args`; each waits up to 60 s.
  auto two_nodes = [&](int node1_slots, const std::string& node1_args,
                       const std::string& both_args = "") {
    const int port = free_port();
    std::vector<std::unique_ptr<Child>> nodes;
    for (int node = 0; node < 2; ++node) {
      nodes.push_back(std::make_unique<Child>(
          fmt::format("OMP_NUM_THREADS=1 {} fit {} --quiet --output {} --slots {} --nnodes 2 "
                      "--node-rank {} --master-addr 127.0.0.1 --master-port {} --set "
                      "resources.distributed_timeout_seconds=60 {} {}",
                      kTrainer, kLinear, tmp / fmt::format("run{}", node),
                      node == 1 ? node1_slots : 2, node, port, both_args,
                      node == 1 ? node1_args : ""),
          tmp / fmt::format("node{}.log", node)));
    }
    std::string logs;
    for (int node = 0; node < 2; ++node) {
      const int code = nodes[static_cast<size_t>(node)]->wait();
      const std::string log = read_file(tmp / fmt::format("node{}.log", node));
      INFO(log);
      CHECK(code == 2);
      logs += log;
    }
    return logs;
  };
  const auto start = std::chrono::steady_clock::now();
  // Without the comparison this run trained to the end with each node's ranks on their own seed,
  // their weights apart, and rank 0's metrics describing weights no checkpoint holds.
  // Both warm-start from one run: its path, each node's own, is compared only as given, and is
  // no difference in the message either.
  REQUIRE(run_command(kTrainer + " fit " + kLinear + " --quiet --output " + (tmp / "source"))
              .exit_code == 0);
  const std::string seeds = two_nodes(2, "--set reproducibility.experiment_seed=12345",
                                      "--set searcher.source_trial_id=" + (tmp / "source"));
  CHECK_THAT(seeds, Catch::Contains("was started otherwise than rank") &&
                        Catch::Contains("the configs differ:") &&
                        Catch::Contains("  reproducibility.experiment_seed: ") &&
                        Catch::Contains("give every node's launcher the same experiment file and "
                                        "--set options (checkpoint_storage may differ)") &&
                        !Catch::Contains("source_trial_id"));
  // Without it every rank waited out the timeout and named a rank 1 that no node started.
  const std::string slots = two_nodes(4, "");
  CHECK_THAT(slots, Catch::Contains("every node's launcher must be given the same number of "
                                    "slots and nodes") &&
                        !Catch::Contains("had not joined"));
  // A node whose launcher fails before it starts its workers: node 0's rank gives up on its
  // peers, and its launcher says the cause is on another node.
  const int port = free_port();
  Child node0(fmt::format("OMP_NUM_THREADS=1 {} fit {} --quiet --output {} --slots 2 --nnodes 2 "
                          "--node-rank 0 --master-addr 127.0.0.1 --master-port {} --set "
                          "resources.distributed_timeout_seconds=3",
                          kTrainer, kLinear, tmp / "alone", port),
              tmp / "alone.log");
  CHECK(node0.wait() == crucible::kExitPeerLost);
  const std::string alone = read_file(tmp / "alone.log");
  INFO(alone);
  CHECK_THAT(alone, Catch::Contains("error: rank 0 exited with code 5 (it lost its peers: the "
                                    "failure is on another node, whose launcher names it). Rank "
                                    "0's last lines:") &&
                        !Catch::Contains("the other ranks were stopped"));
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(60));
}

TEST_CASE("buffers and gradients after backward are the same on every rank (small buckets)",
          "[dist][fit]") {
  TempDir tmp;
  const std::string config = tmp / "bn.yaml";
  write_file(config, R"(name: bn
entrypoint: crucible_test_trials:BatchNormTrial
hyperparameters: {global_batch_size: 32, records: 640}
max_length: {epochs: 2}
optimizations: {gradient_bucket_mb: 0.0002}
)");
  for (int slots : {2, 3}) {
    INFO(slots << " slots");
    const std::string run = tmp / fmt::format("run{}", slots);
    auto r = run_command(kTrainer + " fit " + config + " --quiet --output " + run + " --slots " +
                         std::to_string(slots) +
                         (slots == 3 ? " --set hyperparameters.global_batch_size=33" : ""));
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    const auto m = final_validation(run);
    INFO(m.dump());
    // Each rank normalises its own shard, so its running statistics differ until rank 0's are
    // copied to all after every batch.
    CHECK(m["validation_stats_max"].get<double>() == m["validation_stats_min"].get<double>());
    CHECK(m["validation_stats_max"].get<double>() != 0.0);
    CHECK(m["validation_loss"].get<double>() < 0.5);
    // The log names the device and the backend that carries the model's tensors.
    const torch::Device device = crucible::dist::rank_device(0);
    CHECK_THAT(read_file(run + "/trainer.log"),
               Catch::Contains(fmt::format(
                   "on {}, {} ranks over {}", device.str(), slots,
                   crucible::dist::use_nccl(crucible::DistributedBackend::kAuto, device, slots)
                       ? "nccl"
                       : "gloo")));
    // The gradients are the same on every rank as soon as ctx.backward returns.
    for (const auto& row : training_rows(run)) {
      CHECK(row["metrics"]["grad_spread"].get<double>() == 0.0);
    }
    if (slots == 2) {
      // Gradients copied into and out of the buckets instead of living in them: the same sums
      // and divisions, so bitwise the same run.
      const std::string copied = tmp / "run2_copied";
      auto c = run_command(kTrainer + " fit " + config + " --quiet --output " + copied +
                           " --slots 2 --set optimizations.gradient_as_bucket_view=false");
      INFO(c.output);
      REQUIRE(c.exit_code == 0);
      CHECK(final_validation(copied) == m);
    }
  }
}

TEST_CASE(
    "a parameter no rank gives a gradient in a window is not stepped: as in one process and "
    "across a resume inside a window",
    "[dist][fit]") {
  TempDir tmp;
  const std::string config = tmp / "idle.yaml";
  write_file(config, R"(name: idle
entrypoint: crucible_test_trials:IdleLayerTrial
hyperparameters: {global_batch_size: 16, records: 256}
max_length: {batches: 12}
scheduling_unit: 1
optimizations: {aggregation_frequency: 2}
)");
  // The idle layer moved on the first window's step and never after (with a zero gradient,
  // momentum and weight decay would have moved it on every later step).
  const auto check_idle = [](const std::string& run) {
    INFO(run);
    bool stepped = false;
    for (const auto& row : training_rows(run)) {
      INFO(row.dump());
      CHECK(row["metrics"]["idle_later"].get<double>() == 0.0);
      if (row["batches"].get<int64_t>() == 2) stepped = row["metrics"]["idle_step"] > 0.0;
    }
    CHECK(stepped);
  };
  const std::string one = tmp / "one", two = tmp / "two", copied = tmp / "copied";
  fitted(config, one, 1);
  fitted(config, two, 2);
  fitted(config, copied, 2, " --set optimizations.gradient_as_bucket_view=false");
  for (const auto& run : {one, two, copied}) check_idle(run);
  CHECK(final_validation(copied) == final_validation(two));

  // Stopped after 3 batches, inside the window of batches 2 and 3, where the idle layer's
  // gradient is still the zeros the first window's step left: the checkpoint saves it as none.
  const std::string resumed = tmp / "resumed";
  fitted(config, resumed, 2, " --set max_length.batches=3");
  // A change not accepted is refused once, by the launcher, before any rank starts.
  const auto refused =
      run_command(kTrainer + " fit --resume " + resumed + " --set max_length.batches=12");
  INFO(refused.output);
  CHECK(refused.exit_code == 2);
  CHECK(count_of(refused.output, "pass --allow-safe-changes") == 1);
  CHECK_THAT(refused.output, !Catch::Contains("[rank"));
  resumed_to(resumed, 12);
  check_idle(resumed);
  CHECK(final_validation(resumed) == final_validation(two));
  // Resumed at its end: says so, once, and how to train longer.
  const auto again = run_command(kTrainer + " fit --resume " + resumed);
  INFO(again.output);
  CHECK(again.exit_code == 0);
  CHECK(count_of(again.output,
                 "had trained its max_length (12 batches): nothing left to "
                 "train. To train it longer: trainer fit --resume " +
                     resumed + " --set max_length.batches=N") == 1);
}

TEST_CASE(
    "a layer unfrozen or frozen or added to the optimizer during a run is averaged while it trains "
    "and left alone after: 1 and 2 slots",
    "[dist][fit]") {
  TempDir tmp;
  const std::string config = tmp / "freeze.yaml";
  // Updates after batches 1, 3, 5, 7, 9 and 11. The first layer trains from batch 4 on (its
  // first update after batch 5); the second is frozen at batch 7, after batch 6's backward gave
  // it a gradient, so the update after batch 7 still moves it, and none after.
  write_file(config, R"(name: freeze
entrypoint: crucible_test_trials:FreezeTrial
hyperparameters: {global_batch_size: 16, records: 256, unfreeze_at: 4, freeze_at: 7}
max_length: {batches: 12}
scheduling_unit: 1
optimizations: {aggregation_frequency: 2}
)");
  // Also: the second layer frozen after the backward of batch 7 (the update's) or of batch 6
  // (before the window's last backward), both stepped with the mean of the window's gradients
  // at the update after batch 7; and, instead of the unfreezing, the first layer added to the
  // optimizer as a parameter group at batch 5 (a change of the optimizer's parameters alone, in
  // the window of batches 4 and 5). The updates that move each layer stay the same.
  const std::string no_view = " --set optimizations.gradient_as_bucket_view=false";
  const std::string after_backward = " --set hyperparameters.freeze_after_backward=true";
  const std::string grow = " --set hyperparameters.grow_at=5";
  const std::vector<std::pair<int, std::string>> runs = {
      {1, ""},
      {2, ""},
      {2, no_view},
      {2, after_backward},
      {2, after_backward + " --set hyperparameters.freeze_at=6"},
      {2, after_backward + " --set hyperparameters.freeze_at=6" + no_view},
      {1, grow},
      {2, grow},
      {2, grow + no_view}};
  for (size_t i = 0; i < runs.size(); ++i) {
    const auto& [slots, args] = runs[i];
    INFO(slots << " slots" << args);
    const std::string run = tmp / fmt::format("run{}", i);
    fitted(config, run, slots, args);
    const auto rows = training_rows(run);
    CHECK(rows.size() == 12);
    for (const auto& row : rows) {
      const auto& m = row["metrics"];
      INFO(row.dump());
      const int64_t batch = row["batches"].get<int64_t>() - 1;  // the batch just trained
      const bool update = batch % 2 == 1;
      CHECK(m["first_spread"].get<double>() == 0.0);
      CHECK(m["second_spread"].get<double>() == 0.0);
      CHECK((m["first_moved"].get<double>() > 0) == (update && batch >= 5));
      CHECK((m["second_moved"].get<double>() > 0) == (update && batch <= 7));
    }
  }

  // Windows of 3 batches: batch 6's backward gives the second layer a gradient, batch 7 freezes
  // it, and a checkpoint after batch 7 falls before the window's update. The resumed run must
  // step the layer with the mean, as the uninterrupted run does, not with each rank's own.
  const std::string k3 = " --set optimizations.aggregation_frequency=3";
  const std::string reference = tmp / "k3", resumed = tmp / "k3-resumed";
  fitted(config, reference, 2, k3);
  fitted(config, resumed, 2, k3 + " --set max_length.batches=8");
  resumed_to(resumed, 12);
  for (const auto& row : training_rows(resumed)) {
    INFO(row.dump());
    CHECK(row["metrics"]["second_spread"].get<double>() == 0.0);
  }
  CHECK(final_validation(resumed) == final_validation(reference));
}

TEST_CASE("gradient clipping: every rank clips the same mean gradient, per optimizer",
          "[dist][fit]") {
  TempDir tmp;
  const std::string config = tmp / "clip.yaml";
  write_file(config, R"(name: clip
entrypoint: crucible_test_trials:ClippingTrial
hyperparameters: {global_batch_size: 32, records: 320}
max_length: {epochs: 2}
scheduling_unit: 1
optimizations:
  gradient_clipping: {max_norm: 0.001}
)");
  const std::string run = tmp / "run";
  auto r = fit_slots(config, run, 2);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const auto rows = training_rows(run);
  CHECK(rows.size() == 20);
  for (const auto& row : rows) {
    const auto& m = row["metrics"];
    INFO(m.dump());
    // The pre-clip norms of each optimizer's gradients, then updates of exactly max_norm.
    CHECK(m["grad_norm"].get<double>() > 0.01);
    CHECK(m["grad_norm_1"].get<double>() > 0.01);
    CHECK(m["update_norm"].get<double>() == Approx(0.001).epsilon(1e-3));
    CHECK(m["update_norm_second"].get<double>() == Approx(0.001).epsilon(1e-3));
    CHECK(m["update_spread"].get<double>() == 0.0);
  }
}

TEST_CASE("a custom reducer's cross-slot step runs on every rank and is exact", "[dist][fit]") {
  TempDir tmp;
  for (int slots : {1, 2, 3}) {
    INFO(slots << " slots");
    const std::string dir = tmp / fmt::format("reducers{}", slots);
    util::create_directories(dir);
    const std::string config = tmp / "reducer.yaml";
    // 71 validation records in batches of 8: uneven shards on 2 and 3 ranks.
    write_file(config, fmt::format(R"(name: reducer
entrypoint: crucible_test_trials:ReducerTrial
hyperparameters: {{global_batch_size: 6, records: 60, validation_records: 71,
                  validation_batch_size: 8, reducer_dir: {}}}
searcher: {{metric: validation_median_x}}
max_length: {{batches: 20}}
min_validation_period: {{batches: 10}}
)",
                                   dir));
    const std::string run = tmp / fmt::format("run{}", slots);
    auto r = run_command(kTrainer + " fit " + config + " --quiet --output " + run + " --slots " +
                         std::to_string(slots));
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    CHECK(final_validation(run)["validation_median_x"].get<double>() == 35.0);
    for (int rank = 0; rank < slots; ++rank) {
      // Two validations (batches 10 and 20), each reduced on this rank over all ranks' records.
      CHECK(read_file(dir + fmt::format("/rank{}", rank)) ==
            fmt::format("35 {}\n35 {}\n", slots, slots));
    }
  }
}

TEST_CASE("a reducer named like an evaluate_batch metric is an error naming it", "[dist][fit]") {
  TempDir tmp;
  auto r = fit_yaml(tmp, R"(name: clash
entrypoint: crucible_test_trials:ReducerTrial
hyperparameters: {global_batch_size: 6, records: 60, validation_records: 10,
                  validation_batch_size: 8, reducer_name: avg_x}
searcher: {metric: validation_avg_x}
max_length: {batches: 5}
)");
  INFO(r.output);
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.output, Catch::Contains("validation metric 'avg_x' comes both from evaluate_batch "
                                       "and from a reducer"));
}

TEST_CASE("a rank that throws stops the run: the launcher names it", "[dist][fit]") {
  TempDir tmp;
  auto r = fit_yaml(tmp, recording_yaml("fail", "fail_at: 5, fail_rank: 1",
                                        "max_length: {batches: 20}\n"
                                        "resources: {slots_per_trial: 2}\n"));
  INFO(r.output);
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.output, Catch::Contains("error: rank 1 exited with code 1; the other ranks were "
                                       "stopped") &&
                           Catch::Contains("train_batch (batch 5) threw: injected failure"));
}

TEST_CASE("a NaN loss on 2 ranks stops the run with the error one rank gives", "[dist][fit]") {
  TempDir tmp;
  // The ranks' means travel between them as they are: NaN, not null.
  auto r = fit_yaml(tmp, recording_yaml("nan", "nan_at: 3",
                                        "max_length: {batches: 20}\n"
                                        "min_checkpoint_period: {batches: 2}\n"
                                        "scheduling_unit: 100\n"
                                        "resources: {slots_per_trial: 2}\n"));
  INFO(r.output);
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.output, Catch::Contains("training metric 'loss' is nan at batch 3 (epoch 0) "
                                       "(optimizations.non_finite: stop); stopping"));
  CHECK(util::exists(tmp / "run/checkpoints/batch-0000000002/metadata.json"));
}

TEST_CASE("a stop one rank's trial requests ends every rank one batch later, cleanly",
          "[dist][fit]") {
  for (const int asking : {0, 1}) {
    INFO("rank " << asking << " asks");
    TempDir tmp;
    auto r = fit_yaml(tmp, fmt::format(R"(name: stop
entrypoint: crucible_test_trials:RecordingTrial
hyperparameters: {{global_batch_size: 8, records: 100, validation_records: 20,
                  validation_batch_size: 4, stop_at: 6, fail_rank: {}}}
max_length: {{batches: 40}}
searcher: {{metric: validation_avg_x}}
resources: {{slots_per_trial: 2}}
)",
                                       asking));
    INFO(r.output);
    CHECK(r.exit_code == 0);
    const auto rows = read_metrics(tmp / "run/metrics.jsonl");
    REQUIRE(rows.size() >= 2);
    // Asked during batch 6; the ranks' vote on it completes after batch 7.
    const auto& stopped = rows[rows.size() - 2];
    CHECK(stopped["type"] == "stopped");
    CHECK(stopped["batches"] == 8);
    CHECK(stopped["reason"] ==
          (asking == 0 ? "stop_at reached" : "another rank's trial requested a stop"));
    CHECK(rows.back()["type"] == "validation");
    CHECK(rows.back()["batches"] == 8);
    CHECK(util::exists(tmp / "run/checkpoints/batch-0000000008/metadata.json"));
  }
}

TEST_CASE("a stop still in the ranks' vote at a checkpoint is acted on by the resumed run",
          "[dist][fit]") {
  TempDir tmp;
  const std::string config = tmp / "stop.yaml";
  write_file(config, recording_yaml("stop", "stop_at: 6, fail_rank: 1",
                                    "max_length: {batches: 40}\n"
                                    "searcher: {metric: validation_avg_x}\n"));
  // Rank 1 asks during batch 6; the vote started after it stops both ranks after batch 7.
  const std::string whole = tmp / "whole";
  fitted(config, whole, 2);
  // Every rank gets SIGTERM during batch 6 (the vote read after batch 7 holds the signal and the
  // request: the signal wins) or during batch 5 (the vote read after batch 6 holds the signal
  // alone, and rank 1's request has no vote yet). Each stops with a checkpoint, which keeps the
  // request; resumed, the run stops where the unsignalled one does.
  for (const int signal_at : {6, 5}) {
    INFO("SIGTERM in batch " << signal_at);
    const std::string run = tmp / fmt::format("signalled-{}", signal_at);
    const auto r =
        fit_slots(config, run, 2, fmt::format(" --set hyperparameters.sigterm_at={}", signal_at));
    INFO(r.output);
    REQUIRE(r.exit_code == crucible::kExitStopped);
    resumed_to(run, 40);
    for (const std::string& each : {whole, run}) {
      INFO(each);
      const auto rows = read_metrics(each + "/metrics.jsonl");
      REQUIRE(rows.size() >= 2);
      const auto& stopped = rows[rows.size() - 2];
      CHECK(stopped["type"] == "stopped");
      CHECK(stopped["batches"] == 8);
      CHECK(stopped["reason"] == "another rank's trial requested a stop");
    }
    CHECK(final_validation(run) == final_validation(whole));
  }
}

TEST_CASE("a rank that hangs makes the others fail within the timeout: the launcher names it",
          "[dist][fit]") {
  TempDir tmp;
  const auto started = std::chrono::steady_clock::now();
  auto r = fit_yaml(tmp, R"(name: hang
entrypoint: crucible_test_trials:RecordingTrial
hyperparameters: {global_batch_size: 8, records: 100, validation_records: 20,
                  validation_batch_size: 4, hang_at: 5, fail_rank: 1}
max_length: {batches: 20}
resources: {slots_per_trial: 2, distributed_timeout_seconds: 3}
)");
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  INFO(r.output);
  CHECK(r.exit_code == crucible::kExitPeerLost);
  CHECK_THAT(r.output, Catch::Contains("error: rank 1 stopped responding") &&
                           Catch::Contains("rank 0 exited with code 5") &&
                           Catch::Contains("rank 0: gradient allreduce across ranks failed"));
  // Asked by the launcher, the hung rank said where it was stuck, with its stack.
  CHECK(std::regex_search(r.output,
                          std::regex(R"(\[rank 1\] warning: rank 1: asked what it is doing \(by )"
                                     R"(process [0-9]+\): in train_batch \(batch 5\)\n)"
                                     R"(\[rank 1\] native stack of the main thread, innermost )"
                                     R"(frame first:\n)")));
  CHECK_THAT(r.output, Catch::Contains("RecordingTrial11train_batch"));
  // 3 s timeout, 1 s for the others to fail, 10 s between SIGTERM and SIGKILL of the hung rank.
  CHECK(seconds < 30);
}

TEST_CASE("a SIGKILLed worker is named: killing the launcher leaves no worker", "[dist][fit]") {
  TempDir tmp;
  const std::string run = tmp / "run";
  SECTION("one worker killed") {
    Child launcher(kTrainer + " fit " + resumable_config(tmp, 20) + " --slots 2 --output " + run,
                   tmp / "log");
    REQUIRE(wait_until([&] { return last_batches(run + "/metrics.jsonl", "training") >= 7; }));
    const auto pids = run_command("pgrep -P " + std::to_string(launcher.pid())).output;
    std::istringstream in(pids);
    std::vector<int> workers;
    for (int pid; in >> pid;) workers.push_back(pid);
    REQUIRE(workers.size() == 2);
    ::kill(workers[1], SIGKILL);
    CHECK(launcher.wait() == 128 + SIGKILL);
    CHECK_THAT(read_file(tmp / "log"),
               Catch::Contains("was killed by signal 9") && Catch::Contains("error: rank "));
  }
  SECTION("the launcher killed") {
    Child launcher(kTrainer + " fit " + resumable_config(tmp, 20) + " --slots 2 --output " + run,
                   tmp / "log");
    REQUIRE(wait_until([&] { return last_batches(run + "/metrics.jsonl", "training") >= 7; }));
    launcher.signal(SIGKILL);
    launcher.wait();
    CHECK(wait_until(
        [&] { return run_command("pgrep -f -- '--output " + run + "$'").output.empty(); }, 10));
  }
}

TEST_CASE(
    "a 2-slot run killed, preempted or cut off from its console, then resumed, ends bitwise "
    "identical",
    "[dist][fit][resume]") {
  TempDir tmp;
  const std::string reference = tmp / "reference";
  auto full = run_command(kTrainer + " fit " + resumable_config(tmp, 0) + " --slots 2 --quiet " +
                          "--output " + reference);
  INFO(full.output);
  REQUIRE(full.exit_code == 0);

  const std::string run = tmp / "run";
  int signal = 0;
  int expected_exit = 0;
  SECTION("SIGKILL of the launcher") {
    signal = SIGKILL;
    expected_exit = 128 + SIGKILL;
  }
  SECTION(
      "SIGUSR2 then SIGTERM to the launcher: each rank says what it does, then every rank stops "
      "at the same batch, checkpointed") {
    signal = SIGTERM;
    expected_exit = 4;
  }
  SECTION("SIGHUP to the launcher (its terminal went away): the same as SIGTERM") {
    signal = SIGHUP;
    expected_exit = 4;
  }
  SECTION("the launcher's console closed: every rank stops at the same batch, checkpointed") {
    signal = SIGPIPE;  // not sent: the reader of the launcher's stdout ends after batch 21
  }
  bool torchrun = false;
  SECTION("rank 0 of torchrun's 2 cut off from its console: both stop at one batch, checkpointed") {
    signal = SIGPIPE;  // not sent: the reader of rank 0's stdout ends after batch 21
    torchrun = true;
  }
  if (torchrun) {
    const int port = free_port();
    const std::string fit =
        kTrainer + " fit " + resumable_config(tmp, 60) + " --slots 2 --output " + run;
    Child rank1(torchrun_env(1, 2, port) + " " + fit + " --quiet", tmp / "rank1.log");
    const auto rank0 = run_until_line(torchrun_env(0, 2, port) + " " + fit, "batch *21 ");
    INFO(rank0.output);
    INFO(read_file(tmp / "rank1.log"));
    CHECK(rank0.exit_code == 4);
    CHECK_THAT(rank0.output,
               Catch::Contains("warning: the console was closed (standard output: Broken pipe): "
                               "checkpointing at batch"));
    CHECK(rank1.wait() == 4);
    // Rank 0 found its pipe closed after a batch past 21, before its next line (the report at 28)
    // could fail, and both ranks stopped at the next vote (60 ms a batch: sed has 5 to end).
    CHECK(latest(run) >= "batch-0000000021");
    CHECK(latest(run) < "batch-0000000028");
  } else if (signal == SIGPIPE) {
    const auto piped = run_until_line(
        kTrainer + " fit " + resumable_config(tmp, 60) + " --slots 2 --output " + run,
        "batch *21 ");
    INFO(piped.output);
    CHECK(piped.exit_code == 4);
    CHECK_THAT(piped.output,
               Catch::Contains("the launcher's standard output was closed: the ranks' is closed "
                               "too, so that they stop as on SIGTERM, with a checkpoint") &&
                   Catch::Contains("[rank 0] warning: the console was closed (standard output: "
                                   "Broken pipe): checkpointing at batch"));
    // The launcher found its stdout's reader gone at once, before the next line it relayed (the
    // report at 28) could fail, and closed rank 0's stdout, which rank 0 found after its batch
    // (60 ms a batch: sed and the launcher have 5 to act).
    CHECK(latest(run) >= "batch-0000000021");
    CHECK(latest(run) < "batch-0000000028");
  } else {
    Child launcher(
        kTrainer + " fit " + resumable_config(tmp, 20) + " --slots 2 --quiet --output " + run,
        tmp / "log");
    REQUIRE(wait_until([&] { return last_batches(run + "/metrics.jsonl", "training") >= 49; }));
    if (signal == SIGTERM) {
      // Asked what it is doing (SIGUSR2), the launcher asks its ranks; each answers, with its
      // stack, and goes on (the resume below still ends bitwise identical).
      launcher.signal(SIGUSR2);
      // The answer's heading, then its stack down to a frame of libcrucible (the fit loop, which
      // every answer passes through). The frames come one line at a time, relayed by the
      // launcher between the other rank's lines: the log is read until they are all there.
      const auto answered = [&](int rank) {
        const std::string log = read_file(tmp / "log");
        std::smatch heading;
        if (!std::regex_search(
                log, heading,
                std::regex(fmt::format(R"(\[rank {0}\] warning: rank {0}: asked what it is doing )"
                                       R"(\(by process [0-9]+\): [^\n]+\n\[rank {0}\] native )"
                                       R"(stack of the main thread, innermost frame first:\n)",
                                       rank)))) {
          return false;
        }
        std::istringstream after(heading.suffix().str());
        const std::string prefix = fmt::format("[rank {}] ", rank);
        for (std::string line; std::getline(after, line);) {
          if (line.rfind(prefix, 0) == 0 && line.find("libcrucible.so") != std::string::npos) {
            return true;
          }
        }
        return false;
      };
      const bool both = wait_until([&] { return answered(0) && answered(1); }, 20);
      INFO(read_file(tmp / "log"));
      CHECK(both);
    }
    launcher.signal(signal);
    CHECK(launcher.wait() == expected_exit);
  }
  if (signal == SIGTERM || signal == SIGHUP) {
    // The stop checkpoint is newer than the periodic ones (40, 60): taken where the ranks agreed.
    CHECK(latest(run) > "batch-0000000049");
  }
  auto resumed = run_command(kTrainer + " fit --resume " + run);
  INFO(resumed.output);
  REQUIRE(resumed.exit_code == 0);
  check_same_end(reference, run);

  auto other_slots = run_command(kTrainer + " fit --resume " + run + " --slots 4");
  CHECK(other_slots.exit_code == 2);
  CHECK_THAT(other_slots.output,
             Catch::Contains("the run trains on 2 slots (resources.slots_per_trial) and --slots "
                             "asks for 4") &&
                 !Catch::Contains("[rank"));  // refused before any worker starts
  // An outside launcher's count is adopted for a new run, never for a resumed one.
  auto one_process = run_command("RANK=0 WORLD_SIZE=1 " + kTrainer + " fit --resume " + run);
  CHECK(one_process.exit_code == 2);
  CHECK_THAT(one_process.output,
             Catch::Contains("--resume " + run +
                             ": the run trains on 2 slots (resources.slots_per_trial) but "
                             "torchrun started 1 process; a run continues on the slots it "
                             "started with"));
}

TEST_CASE("a launcher whose reader goes after the run's last line ends as the run did: exit 0",
          "[dist][fit]") {
  TempDir tmp;
  const std::string run = tmp / "run";
  // sed ends at "done:", before the summary lines rank 0 writes after it: the launcher finds its
  // stdout closed while the ranks no longer train, and they end as they would have.
  const auto piped = run_until_line(
      kTrainer + " fit " + resumable_config(tmp, 0) + " --slots 2 --output " + run, " done: ");
  INFO(piped.output);
  CHECK(piped.exit_code == 0);
  CHECK_THAT(piped.output, Catch::Contains("done: 128 batches"));
  CHECK(latest(run) == "batch-0000000128");
}

TEST_CASE("bad distributed flags and settings exit 2 naming them", "[dist][fit]") {
  auto fit = [](const std::string& args) {
    return run_command(kTrainer + " fit " + kLinear + " " + args);
  };
  auto check = [](const crucible::testing::CommandResult& r, const std::string& message) {
    INFO(r.output);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Catch::Contains(message));
  };
  check(fit("--slots 0"), "--slots 0: expected an integer of at least 1");
  check(fit("--slots 2 --nnodes 2 --node-rank 2"), "--node-rank 2 is outside --nnodes 2");
  // On 1 slot too, where it was ignored; the rendezvous flags alone are, with a warning.
  check(fit("--node-rank 3 --output /nonexistent/x"), "--node-rank 3 is outside --nnodes 1");
  const TempDir tmp;
  const auto alone = fit("--master-addr 10.9.9.9 --master-port 1234 --quiet --output " +
                         (tmp / "alone") + " --set max_length.batches=2");
  INFO(alone.output);
  CHECK(alone.exit_code == 0);
  CHECK_THAT(alone.output, Catch::Contains("warning: --master-addr and --master-port are ignored: "
                                           "a run of 1 slot on 1 node has no rendezvous"));
  check(fit("--slots 4 --nnodes 3"),
        "resources.slots_per_trial (4) must be a multiple of --nnodes (3)");
  check(fit("--slots 2 --nnodes 2 --node-rank 1 --master-addr 127.0.0.1"), "needs --master-port");
  // Node 0 too: without it, its workers would give the other nodes a loopback address.
  for (const std::string node : {"0", "1"}) {
    check(fit("--slots 2 --nnodes 2 --node-rank " + node + " --master-port 29500"),
          "a run over several nodes needs --master-addr: node 0's address");
  }
  check(fit("--slots 2 --nnodes 2 --master-port 70000"),
        "--master-port 70000: expected an integer from 1 to 65535");
  check(
      run_command("RANK=0 WORLD_SIZE=1 CRUCIBLE_DIST_TIMEOUT=soon " + kTrainer + " fit " + kLinear),
      "CRUCIBLE_DIST_TIMEOUT=soon: expected seconds >= 1");
  for (const char* timeout : {"5min", "inf", "-3", "0.5"}) {
    check(run_command(fmt::format("RANK=0 WORLD_SIZE=1 CRUCIBLE_DIST_TIMEOUT={} {} fit {}", timeout,
                                  kTrainer, kLinear)),
          fmt::format("CRUCIBLE_DIST_TIMEOUT={}: expected seconds >= 1 and at most 1e12", timeout));
  }
  check(run_command("RANK=0 WORLD_SIZE=1 " + kTrainer + " fit " + kLinear + " --slots 2"),
        "--slots 2 but torchrun started 1 process; give the launcher's count or leave --slots out");
  // The rendezvous address: one that does not resolve, on any node, and on node 0 (which serves
  // the store) one that is not this machine's. c10d would retry either until its own timeout.
  const std::string unresolvable = "no-such-host.invalid";
  check(fit("--slots 2 --master-addr " + unresolvable),
        "--master-addr " + unresolvable + ": the name does not resolve (");
  check(fit("--slots 2 --nnodes 2 --node-rank 1 --master-port 29500 --master-addr " + unresolvable),
        "--master-addr " + unresolvable + ": the name does not resolve (");
  check(fit("--slots 2 --master-addr 192.0.2.1"),
        "--master-addr 192.0.2.1: not an address of this machine, which serves the rendezvous "
        "store: give node 0's own name or address");
  check(run_command("RANK=1 WORLD_SIZE=2 MASTER_ADDR=" + unresolvable + " MASTER_PORT=29500 " +
                    kTrainer + " fit " + kLinear),
        "rank 1: rendezvous at " + unresolvable + ":29500 (torchrun) failed: MASTER_ADDR " +
            unresolvable + ": the name does not resolve (");
  check(run_command("RANK=0 WORLD_SIZE=2 MASTER_ADDR=192.0.2.1 MASTER_PORT=29500 " + kTrainer +
                    " fit " + kLinear),
        "(torchrun) failed: MASTER_ADDR 192.0.2.1: not an address of this machine");
  // An outside launcher's variables place the process: half of them, or trainer's own
  // launcher's flags beside them, are refused.
  check(run_command("WORLD_SIZE=2 " + kTrainer + " fit " + kLinear),
        "torchrun: environment variable WORLD_SIZE='2' is set but RANK is not");
  check(run_command("RANK=0 " + kTrainer + " fit " + kLinear),
        "torchrun: environment variable RANK='0' is set but WORLD_SIZE is not");
  check(run_command("RANK=0 WORLD_SIZE=1 " + kTrainer + " fit " + kLinear +
                    " --nnodes 2 --node-rank 1 --master-port 29501"),
        "--nnodes, --node-rank, --master-addr and --master-port are for trainer's own launcher, "
        "but torchrun started this process");
  // NCCL reduces CUDA tensors only: refused before any worker starts, and by a worker that an
  // outside launcher started. The cause depends on the LibTorch: no NCCL in it, or no GPU here.
  const std::string nccl = " --set resources.distributed_backend=nccl";
  const std::string cause = crucible::dist::nccl_built()
                                ? "but this process computes on cpu (CUDA is not available)"
                                : "but this LibTorch was built without NCCL";
  if (!torch::cuda::is_available() || !crucible::dist::nccl_built()) {
    check(fit("--slots 2" + nccl), "resources.distributed_backend is nccl, " + cause);
    check(run_command(kTrainer + " check " + kLinear + nccl + " --set resources.slots_per_trial=2"),
          "resources.distributed_backend is nccl, " + cause);
    check(run_command("RANK=0 WORLD_SIZE=2 MASTER_PORT=1 " + kTrainer + " fit " + kLinear +
                      " --slots 2" + nccl),
          "resources.distributed_backend is nccl, " + cause);
  }
}

TEST_CASE("a rendezvous port another process holds is named, with how to give another",
          "[dist][fit]") {
  TempDir tmp;
  // A listener on every address of the port, as another run's store would be.
  const int port = crucible::util::free_port();
  const PortListener listener(port);
  const auto launched =
      fit_slots(kLinear, tmp / "launched", 2, " --master-port " + std::to_string(port));
  CHECK(launched.exit_code == 1);
  CHECK_THAT(launched.output,
             Catch::Contains(
                 fmt::format("error: cannot serve a rendezvous store on 127.0.0.1:{}: ", port)) &&
                 Catch::Contains("; if another process holds the port, give the run a free one "
                                 "(trainer fit --master-port)\n"));
  // Said once, in Crucible's words: c10d logs no lines of its own about the port before it.
  const std::string taken = "the port is taken (Address already in use)";
  const auto said_once = [](const std::string& output) {
    return count_of(output, "Address already in use") == 1 &&
           output.find("[c10d]") == std::string::npos;
  };
  CHECK_THAT(launched.output, Catch::Contains(taken));
  CHECK(said_once(launched.output));
  // Rank 0 of an outside launcher's run serves the store itself.
  const auto outside = run_command(
      fmt::format("RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT={} {} fit {} --output {}",
                  port, kTrainer, kLinear, tmp / "outside"));
  CHECK(outside.exit_code == crucible::kExitTrainingFailed);
  CHECK_THAT(outside.output,
             Catch::Contains(
                 fmt::format("rank 0: rendezvous at 127.0.0.1:{} (torchrun) failed: ", port)) &&
                 Catch::Contains("; this rank serves the store: if another process holds the port, "
                                 "give the run a free one (MASTER_PORT)\n"));
  CHECK_THAT(outside.output, Catch::Contains(taken));
  CHECK(said_once(outside.output));
  // A rank that reaches the port finds a program that accepts its connection and never answers
  // (the listener, which never accepts: the kernel completes the handshake). Before, c10d's
  // client waited for its answer with no limit.
  const auto start = std::chrono::steady_clock::now();
  const auto mute = run_command(fmt::format(
      "RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT={} CRUCIBLE_DIST_TIMEOUT=2 timeout "
      "60 {} fit {} --output {}",
      port, kTrainer, kLinear, tmp / "mute"));
  CHECK(mute.exit_code == crucible::kExitPeerLost);
  CHECK_THAT(mute.output,
             Catch::Contains(fmt::format("rank 1: rendezvous at 127.0.0.1:{} (torchrun) failed: "
                                         "what holds 127.0.0.1:{} accepted the connection but did "
                                         "not answer within 2 s; is another program on that port",
                                         port, port)));
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(30));
}

TEST_CASE("a rendezvous store that stops listening once a rank reached it is named as gone",
          "[dist][fit]") {
  TempDir tmp;
  // The rank's first connection completes, then the port closes, as when rank 0 ends right
  // after it began to serve. The rank is stopped meanwhile, so that none of its connections is
  // left queued when the port closes (each would be reset).
  const int port = crucible::util::free_port();
  PortListener listener(port);
  const auto start = std::chrono::steady_clock::now();
  Child rank(fmt::format("RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT={} "
                         "CRUCIBLE_DIST_TIMEOUT=2 {} fit {} --output {}",
                         port, kTrainer, kLinear, tmp / "gone"),
             tmp / "gone.log");
  REQUIRE(listener.reached(std::chrono::seconds(60)));
  rank.signal(SIGSTOP);
  int status = 0;
  REQUIRE(::waitpid(rank.pid(), &status, WUNTRACED) == rank.pid());
  INFO(read_file(tmp / "gone.log"));
  REQUIRE(WIFSTOPPED(status));
  // Every thread has stopped; what it sent over loopback has arrived.
  listener.go_away();
  rank.signal(SIGCONT);
  CHECK(rank.wait() == crucible::kExitPeerLost);
  const std::string gone = read_file(tmp / "gone.log");
  INFO(gone);
  CHECK_THAT(gone,
             Catch::Contains(fmt::format(
                 "rank 1: rendezvous at 127.0.0.1:{0} (torchrun) failed: 127.0.0.1:{0} "
                 "accepted a connection, then stopped listening before the store answered "
                 "(Connection refused); rank 0, which serves it, ended or cannot be reached\n",
                 port)));
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(30));
}
