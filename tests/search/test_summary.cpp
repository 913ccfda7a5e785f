// The best checkpoint of a trial, read while the trial's own process writes and deletes them.
#include "catch.h"

#include <atomic>
#include <thread>

#include "checkpoint/checkpoint.h"
#include "process.h"
#include "search/summary.h"
#include "util/file_system.h"

using namespace crucible::testing;
namespace ckpt = crucible::checkpoint;

TEST_CASE("a trial's best checkpoint is found while the trial replaces its checkpoints",
          "[search]") {
  TempDir tmp;
  const std::string run = tmp / "run";
  auto model = torch::nn::Linear(2, 1);
  ckpt::Contents contents;
  contents.models = {model.ptr()};
  const auto save = [&](int64_t batches) {
    ckpt::Metadata meta;
    meta.batches = batches;
    meta.validation = {{"loss", 1.0 / static_cast<double>(batches)}};
    return ckpt::save(run, batches, contents, meta);
  };
  std::string last = save(1);

  // As a trial with save_trial_latest: 1 does while the experiment chooses its best checkpoint:
  // each new checkpoint is written, then the one before it deleted.
  std::atomic<bool> done{false};
  std::thread trial([&] {
    for (int64_t b = 2; b <= 200; ++b) {
      const std::string next = save(b);
      ckpt::remove(last);
      last = next;
    }
    done = true;
  });
  std::string error;
  int reads = 0;
  while (!done && error.empty()) {
    try {
      crucible::search::best_checkpoint(run, "loss", true);
      ++reads;
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  trial.join();
  CHECK(error == "");
  CHECK(reads > 20);
  CHECK(crucible::search::best_checkpoint(run, "loss", true) == last);
  CHECK(ckpt::list(run) == std::vector<std::string>{last});

  // A deletion cut short leaves a temporary directory: the next deletion of that name and
  // remove_unfinished() clear it, and list() never returns it.
  const std::string leftover = tmp / "run/checkpoints/.tmp-removed-batch-0000000201";
  crucible::util::create_directories(leftover + "/inside");
  const std::string again = save(201);
  CHECK(ckpt::list(run).size() == 2);
  ckpt::remove(again);
  CHECK_FALSE(crucible::util::exists(again));
  CHECK_FALSE(crucible::util::exists(leftover));
  crucible::util::create_directories(leftover + "/inside");
  CHECK(ckpt::remove_unfinished(run) == std::vector<std::string>{leftover});
  CHECK(ckpt::list(run) == std::vector<std::string>{last});
}
