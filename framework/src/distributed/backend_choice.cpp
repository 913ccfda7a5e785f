#include "distributed/backend_choice.h"

#include <thread>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <crucible/errors.h>

#include "distributed/backend.h"
#include "util/error_text.h"

namespace crucible::dist {
namespace {

const std::string kRefused = "refused: ";

std::vector<uint8_t> bytes(const std::string& text) { return {text.begin(), text.end()}; }

std::string text(const std::vector<uint8_t>& bytes) { return {bytes.begin(), bytes.end()}; }

// Rank 0's part: every rank's GPU, and the answer for them ("nccl", "gloo", or kRefused and why).
std::string decide(c10d::Store& store, const std::string& prefix, int64_t size,
                   DistributedBackend backend) {
  std::vector<std::string> gpus;
  for (int64_t rank = 0; rank < size; ++rank) {
    gpus.push_back(text(store.get(prefix + "rank-" + std::to_string(rank))));
  }
  try {
    return nccl_for_run(backend, gpus) ? "nccl" : "gloo";
  } catch (const UsageError& e) {
    return kRefused + e.what();
  }
}

// The ranks that have not posted their GPU under `prefix`; empty when the store does not answer.
std::vector<int64_t> silent_ranks(c10d::Store& store, const std::string& prefix, int64_t size) {
  std::vector<int64_t> silent;
  try {
    for (int64_t rank = 0; rank < size; ++rank) {
      if (!store.check({prefix + "rank-" + std::to_string(rank)})) silent.push_back(rank);
    }
  } catch (const std::exception&) {
    return {};
  }
  return silent;
}

}  // namespace

bool agree_on_nccl(c10d::Store& store, const std::string& prefix, const Topology& t,
                   DistributedBackend backend, const std::string& gpu, const std::string& where,
                   bool serves_store, std::chrono::milliseconds linger) {
  const std::string keys = prefix + "gpus/";
  std::string answer;
  try {
    store.set(keys + "rank-" + std::to_string(t.rank), bytes(gpu));
    if (t.rank == 0) store.set(keys + "answer", bytes(decide(store, keys, t.size, backend)));
    answer = text(store.get(keys + "answer"));
  } catch (const std::exception& e) {
    const std::vector<int64_t> silent =
        t.rank == 0 ? silent_ranks(store, keys, t.size) : std::vector<int64_t>();
    if (!silent.empty()) {
      throw PeerLostError(fmt::format(
          "{} failed: {} {} joined but did not name {} GPU in time ({}): ended or hung since",
          where, silent.size() == 1 ? "rank" : "ranks", fmt::join(silent, ", "),
          silent.size() == 1 ? "its" : "their", util::first_line(e)));
    }
    throw PeerLostError(fmt::format(
        "{} failed while the ranks compared their GPUs ({}): rank 0, which decides for them, or "
        "whoever serves the store (rank 0 or the launcher) ended or cannot be reached",
        where, util::first_line(e)));
  }
  if (answer.rfind(kRefused, 0) != 0) return answer == "nccl";
  if (serves_store) std::this_thread::sleep_for(linger);
  throw UsageError(fmt::format("{}: {}", where, answer.substr(kRefused.size())));
}

}  // namespace crucible::dist
