// Real worker processes on loopback: c10d Gloo collectives through DistributedContext, and what
// the survivors say when a rank dies or hangs.
#include <functional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <torch/cuda.h>
#include "catch.h"

#include <crucible/errors.h>

#include "process.h"
#include "torchrun_env.h"

using namespace crucible::testing;

namespace {

const std::string kWorker = std::string(CRUCIBLE_BIN_DIR) + "/dist_worker";

struct Finished {
  int exit_code;
  std::string log;
  double seconds;
};

// Runs `n` dist_workers in `mode`, each with the environment `env_of(rank)` returns; waits at
// most `limit_s` for all of them but rank `hanging` (killing any left), returns each one's exit
// code (-1: killed) and output.
std::vector<Finished> run_world(int n, const std::string& mode,
                                const std::function<std::string(int)>& env_of, double limit_s = 120,
                                int hanging = -1) {
  TempDir tmp;
  std::vector<std::unique_ptr<Child>> children;
  const auto started = std::chrono::steady_clock::now();
  for (int r = 0; r < n; ++r) {
    children.push_back(std::make_unique<Child>(env_of(r) + " " + kWorker + " " + mode,
                                               tmp / ("rank" + std::to_string(r))));
  }
  std::vector<Finished> out(static_cast<size_t>(n), Finished{-1, "", 0});
  wait_until(
      [&] {
        bool all = true;
        for (int r = 0; r < n; ++r) {
          auto& f = out[static_cast<size_t>(r)];
          if (f.exit_code < 0 && children[static_cast<size_t>(r)]->exited()) {
            f.exit_code = children[static_cast<size_t>(r)]->exit_code();
            f.seconds =
                std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
          }
          all = all && (f.exit_code >= 0 || r == hanging);
        }
        return all;
      },
      limit_s);
  for (int r = 0; r < n; ++r) {
    out[static_cast<size_t>(r)].log = read_file(tmp / ("rank" + std::to_string(r)));
  }
  return out;  // children still running are killed by their destructors
}

std::function<std::string(int)> torchrun_world(int n, int port, const std::string& extra = "") {
  return [=](int rank) { return crucible::testing::torchrun_env(rank, n, port) + " " + extra; };
}

nlohmann::json result_of(const Finished& f) {
  INFO(f.log);
  REQUIRE(f.exit_code == 0);
  return nlohmann::json::parse(f.log.substr(0, f.log.find('\n')));
}

// Runs dist_worker `mode` on 2 ranks, then on 3, and hands each rank's result line to
// check(ranks, rank, result).
void check_each_rank(const std::string& mode,
                     const std::function<void(int, int, const nlohmann::json&)>& check) {
  for (int n : {2, 3}) {
    INFO(n << " ranks");
    const auto ranks = run_world(n, mode, torchrun_world(n, free_port()));
    for (int r = 0; r < n; ++r) {
      const auto out = result_of(ranks[static_cast<size_t>(r)]);
      INFO("rank " << r << ": " << out.dump());
      check(n, r, out);
    }
  }
}

// Checks that every rank but `lost` failed within `limit_s` seconds of the start, with
// kExitPeerLost and the message "error: rank R: `operation`...", naming `cause`.
void check_peer_lost(const std::vector<Finished>& ranks, int lost, const std::string& cause,
                     double limit_s,
                     const std::string& operation = "allreduce across ranks failed") {
  for (int r = 0; r < static_cast<int>(ranks.size()); ++r) {
    if (r == lost) continue;
    const Finished& f = ranks[static_cast<size_t>(r)];
    INFO(f.log);
    CHECK(f.exit_code == crucible::kExitPeerLost);
    CHECK_THAT(f.log, Catch::Contains(fmt::format("error: rank {}: {}", r, operation)) &&
                          Catch::Contains(cause));
    CHECK(f.seconds < limit_s);
  }
}

}  // namespace

TEST_CASE("collectives across 2 and 3 ranks give exact results", "[dist]") {
  check_each_rank("collectives", [](int n, int r, const nlohmann::json& j) {
    const double s = n * (n + 1) / 2.0;  // sum of rank + 1
    CHECK(j["rank"] == r);
    CHECK(j["size"] == n);
    CHECK(j["sum"] == nlohmann::json{s, 10 * s});
    CHECK(j["avg"] == nlohmann::json{s / n, 10 * s / n});
    CHECK(j["min"] == nlohmann::json{1.0, 10.0});
    CHECK(j["max"] == nlohmann::json{1.0 * n, 10.0 * n});
    CHECK(j["broadcast"] == 3.0 * (n - 1));
    std::vector<int64_t> gathered;
    for (int i = 0; i < n; ++i) gathered.push_back(7 * i);
    CHECK(j["allgather"] == gathered);
    REQUIRE(j["allgather_object"].size() == static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      CHECK(j["allgather_object"][i]["rank"] == i);
      CHECK(j["allgather_object"][i]["pad"] == std::string(static_cast<size_t>(i * 5 + 1), 'x'));
    }
    CHECK(j["broadcast_object"] == nlohmann::json{{"from", 1}});
    for (int i = 0; i < n; ++i) CHECK(j["non_finite"][i] == (i % 2 == 0 ? "nan inf" : "nan -inf"));
    CHECK(j["broadcast_non_finite"] == "-inf");
    if (r == 0) {
      CHECK(j["gather_object"] == (n == 2 ? nlohmann::json{0, 1} : nlohmann::json{0, 1, 4}));
    } else {
      CHECK(j["gather_object"].empty());
    }
  });
}

TEST_CASE("training means across ranks weigh each value alike and take metrics some ranks lack",
          "[dist]") {
  check_each_rank("train_metrics", [](int, int, const nlohmann::json& j) {
    const auto means = j["means"];
    CHECK(means["loss"] == 3.0);  // (1 + 3 + 5) / 3, not the mean of the ranks' means
    CHECK(means["rare"] == 10.0);
    CHECK(means["skipped_steps"] == 2.0);
  });
}

TEST_CASE("Open MPI's variables join the same kind of run", "[dist]") {
  const int port = free_port();
  const auto ranks = run_world(2, "collectives", [&](int rank) {
    return fmt::format(
        "OMPI_COMM_WORLD_RANK={} OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_LOCAL_RANK={} "
        "OMPI_COMM_WORLD_LOCAL_SIZE=2 MASTER_PORT={}",
        rank, rank, port);
  });
  for (int r = 0; r < 2; ++r) CHECK(result_of(ranks[static_cast<size_t>(r)])["sum"][0] == 3.0);
}

// Runs dist_worker backend under distributed_backend `backend`, rank r naming the GPU gpus[r]
// ("" none).
std::vector<Finished> choose_backend(const std::string& backend,
                                     const std::vector<std::string>& gpus) {
  const int n = static_cast<int>(gpus.size());
  const int port = free_port();
  return run_world(n, "backend", [&](int rank) {
    return fmt::format("{} CRUCIBLE_TEST_BACKEND={} CRUCIBLE_TEST_GPU='{}'",
                       crucible::testing::torchrun_env(rank, n, port), backend,
                       gpus[static_cast<size_t>(rank)]);
  });
}

TEST_CASE("ranks that share a GPU, whichever index each gives it, agree on Gloo under auto",
          "[dist]") {
  for (const auto& gpus : std::vector<std::vector<std::string>>{
           {"node/0000:3B:00.0", "node/0000:3B:00.0"}, {"a/1", "b/1", "a/1"}, {"a/1", "", "a/2"}}) {
    const auto ranks = choose_backend("auto", gpus);
    for (size_t r = 0; r < gpus.size(); ++r) {
      CHECK(result_of(ranks[r])["cuda_backend"] == "gloo");
    }
  }
  const auto ranks = choose_backend("gloo", {"a/1", "a/2"});  // no NCCL wanted: none built
  for (size_t r = 0; r < 2; ++r) CHECK(result_of(ranks[r])["cuda_backend"] == "gloo");
}

TEST_CASE("an explicit nccl that the ranks' GPUs cannot carry is refused on every rank", "[dist]") {
  const auto check_refused = [](const std::vector<Finished>& ranks, const std::string& why) {
    for (size_t r = 0; r < ranks.size(); ++r) {
      INFO(ranks[r].log);
      CHECK(ranks[r].exit_code == crucible::kExitBadUsage);
      CHECK_THAT(ranks[r].log, Catch::Contains(fmt::format("error: rank {}: rendezvous", r)) &&
                                   Catch::Contains(why));
    }
  };
  check_refused(choose_backend("nccl", {"a/1", "b/1", "a/1"}), "ranks 0, 2 share the GPU a/1");
  check_refused(choose_backend("nccl", {"a/1", ""}), "rank 1 has no GPU with NCCL");
}

TEST_CASE("a rank that dies makes the others fail, each naming itself and the operation",
          "[dist]") {
  const auto ranks =
      run_world(3, "die", torchrun_world(3, free_port(), "CRUCIBLE_TEST_TIMEOUT_S=120"));
  CHECK(ranks[1].exit_code == 3);
  // The closed connection tells them, not the timeout.
  check_peer_lost(ranks, 1, "a peer rank died, hangs or is unreachable", 60);
}

TEST_CASE("a rank that vanishes while the others send to it makes them fail, not die of SIGPIPE",
          "[dist]") {
  for (int attempt = 0; attempt < 3; ++attempt) {
    const auto ranks =
        run_world(3, "vanish", torchrun_world(3, free_port(), "CRUCIBLE_TEST_TIMEOUT_S=120"));
    CHECK(ranks[0].exit_code == 3);
    check_peer_lost(ranks, 0, "a peer rank died, hangs or is unreachable", 60);
  }
}

TEST_CASE("a rank that fails before joining makes the others fail after the timeout, naming it",
          "[dist]") {
  // A malformed variable stops rank `missing` before it reaches the store.
  for (int missing : {1, 0}) {
    const auto env = torchrun_world(3, free_port(), "CRUCIBLE_TEST_TIMEOUT_S=3");
    const auto ranks = run_world(3, "collectives", [&](int rank) {
      return rank == missing ? env(rank) + " WORLD_SIZE=three" : env(rank);
    });
    CHECK(ranks[static_cast<size_t>(missing)].exit_code == crucible::kExitBadUsage);
    // Rank 0 serves the store; the first rank to give up records who was missing for all.
    check_peer_lost(ranks, missing,
                    missing == 0 ? "failed: no store answered within 3 s"
                                 : "failed: rank 1 had not joined after 3 s",
                    15, "rendezvous at ");
  }
}

TEST_CASE("a rank that hangs makes the others fail within the timeout", "[dist]") {
  const auto ranks = run_world(
      3, "hang", torchrun_world(3, free_port(), "CRUCIBLE_TEST_TIMEOUT_S=3"), 30, /*hanging=*/1);
  check_peer_lost(ranks, 1, "timeout 3 s", 15);
  CHECK(ranks[1].exit_code == -1);  // still hanging when the others gave up: killed by the test
}

TEST_CASE("gradient buckets are all-reduced during backward and give the exact mean", "[dist]") {
  check_each_rank("grad_sync", [](int, int r, const nlohmann::json& out) {
    for (const char* mode : {"overlap_view", "overlap", "plain_view", "plain"}) {
      INFO(mode);
      const auto& m = out[mode];
      const bool view = std::string(mode).find("_view") != std::string::npos;
      const bool overlap = std::string(mode).rfind("overlap", 0) == 0;
      // 1 KiB buckets: [c, b.bias] [b.weight] [a.bias] [a.weight] [rank0, unused, flags].
      CHECK(m["buckets"].get<int>() == 5);
      // Steps 1, 2 and 5 are one backward pass, step 4 one in which no rank uses the rank0
      // layer: it is then left without a gradient, as in one process.
      for (const char* step : {"step1", "step2", "step4", "step5"}) {
        INFO(step);
        CHECK(m[step]["error"].get<double>() <= 1e-6);
        CHECK_FALSE(m[step]["redone"].get<bool>());
        CHECK(m[step]["plain_gradients"].get<bool>());
        CHECK_FALSE(m[step]["unused_has_grad"].get<bool>());
        // The mean of rank 0's and zeros; none where no rank has one.
        CHECK(m[step]["rank0_has_grad"].get<bool>() == (std::string(step) != "step4"));
        // Overlap: every bucket but the last (which finish() starts) started during backward.
        CHECK(m[step]["started_early"].get<int>() == (overlap ? 4 : 0));
      }
      // Gradients start as none: each rank copies those it has (rank 0 also the rank0 layer).
      CHECK(m["step1"]["copies"].get<int>() == (r == 0 ? 8 : 6));
      // Then they are the buckets themselves (cleared in place, they stay so), or the rank's own
      // gradients are copied each time (rank 1's cleared rank0 layer counts as none: no copy).
      CHECK(m["step2"]["copies"].get<int>() == (view ? 0 : (r == 0 ? 8 : 6)));
      CHECK(m["step4"]["copies"].get<int>() == (view ? 0 : 6));
      // Step 4 left the rank0 layer none: rank 0's new gradient of it is copied in once.
      CHECK(m["step5"]["copies"].get<int>() == (view ? (r == 0 ? 2 : 0) : (r == 0 ? 8 : 6)));
      // A second finish() after a pass outside the window averages again what the ranks hold:
      // the first finish()'s mean counts as a gradient on every rank, rank 1's of the rank0
      // layer included (else that mean would be halved).
      CHECK(m["no_backward"]["changed"].get<bool>());
      CHECK_FALSE(m["no_backward"]["any_gradient"].get<bool>());
      CHECK(m["step6"]["error"].get<double>() <= 1e-6);
      CHECK(m["step6"]["rank0_has_grad"].get<bool>());
      // Two backward passes in one window.
      const auto& twice = m["step3"];
      if (overlap && view) {
        // The first pass's buckets were being reduced in place: an error on every rank.
        CHECK_THAT(twice.value("threw", ""),
                   Catch::Contains(fmt::format("rank {}: a gradient changed after its bucket's "
                                               "all-reduce had started",
                                               r)) &&
                       Catch::Contains("gradient_as_bucket_view: true"));
      } else {
        CHECK(twice["error"].get<double>() <= 1e-6);
        // With copies, changed gradients make every rank average again.
        CHECK(twice["redone"].get<bool>() == overlap);
      }
    }
  });
}

TEST_CASE("float16 gradients whose sum overflows float16 average to their mean, not to inf",
          "[dist]") {
  check_each_rank("half_grad_sync", [](int n, int, const nlohmann::json& out) {
    // The mean of 40000, 30000 (and 20000).
    const double mean = n == 2 ? 35000 : 30000;
    for (const char* mode : {"view", "copy"}) {
      INFO(mode);
      for (const double g : out[mode].get<std::vector<double>>()) {
        CHECK(g == Approx(mean).epsilon(1e-3));
      }
    }
    // Sparse gradients: rows 0 and 2 (two elements each) hold the mean, rows 1 and 3 none, or
    // rank 0's dense 40000 over the ranks.
    for (const char* mode : {"sparse", "mixed"}) {
      INFO(mode);
      const auto g = out[mode].get<std::vector<double>>();
      REQUIRE(g.size() == 8);
      for (size_t i = 0; i < g.size(); ++i) {
        const bool row = i / 2 == 0 || i / 2 == 2;
        const double expected = row ? mean : std::string(mode) == "mixed" ? 40000.0 / n : 0.0;
        CHECK(g[i] == Approx(expected).epsilon(1e-3));
      }
    }
  });
}

// On the CPU, and on CUDA device 0 too when there is one.
TEST_CASE("sparse gradients are averaged sparse: only the rows the ranks have travel",
          "[dist][sparse]") {
  std::vector<std::string> modes = {"overlap", "plain"};
  if (torch::cuda::is_available()) {
    modes.push_back("overlap_cuda");
    modes.push_back("plain_cuda");
  }
  check_each_rank("sparse_grad_sync", [&](int, int, const nlohmann::json& out) {
    for (const std::string& mode : modes) {
      INFO(mode);
      REQUIRE(out.contains(mode));
      const auto& m = out[mode];
      // 1 KiB buckets: the 16 KB embedding would be a bucket of its own; only the dense head
      // and the flags are in one.
      CHECK(m["buckets"].get<int>() == 1);
      for (const char* step : {"step1", "step2", "step3"}) {
        INFO(step);
        const auto& s = m[step];
        // Used by rank 0 in the first two steps, by no rank in the third: then no gradient, as
        // in one process.
        const bool rank0_used = std::string(step) != "step3";
        CHECK(s["rank0"]["has_grad"].get<bool>() == rank0_used);
        std::vector<const char*> with_grad = {"rows", "tied"};
        if (rank0_used) with_grad.push_back("rank0");
        for (const char* param : with_grad) {
          INFO(param);
          REQUIRE(s[param]["has_grad"].get<bool>());
          CHECK(s[param]["error"].get<double>() <= 1e-6);
          CHECK(s[param]["same_on_every_rank"].get<bool>());
          if (std::string(param) == "tied") continue;
          REQUIRE(s[param]["sparse"].get<bool>());
          CHECK(s[param]["coalesced"].get<bool>());
          CHECK(s[param]["sparse_dim"].get<int64_t>() == 1);
          CHECK(s[param]["nnz"].get<int64_t>() > 0);
        }
        // One entry per row some rank looked up, not one per row of the table.
        CHECK(s["rows"]["nnz"].get<int64_t>() == s["rows_looked_up"].get<int64_t>());
        // Dense on the last rank: averaged dense, as one process would have it.
        CHECK_FALSE(s["tied"]["sparse"].get<bool>());
        CHECK_FALSE(s["unused"]["has_grad"].get<bool>());
      }
    }
  });
}
