#include "distributed/roll_call.h"

#include <algorithm>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <crucible/errors.h>

#include "distributed/store_text.h"
#include "util/error_text.h"

namespace crucible::dist {
namespace {

// Added to the count by the rank that closes the roll call: a count at or above it means closed.
constexpr int64_t kClosed = int64_t{1} << 40;
const std::string kAllCame = "all came";

// The key of `rank`'s announcement.
std::string came(const std::string& prefix, int64_t rank) {
  return prefix + "roll-call/rank-" + std::to_string(rank);
}

class RollCall {
 public:
  RollCall(c10d::Store& store, const std::string& prefix, const Topology& t,
           std::chrono::milliseconds timeout)
      : store_(store),
        run_prefix_(prefix),
        prefix_(prefix + "roll-call/"),
        t_(t),
        timeout_(timeout),
        count_(prefix_ + "count"),
        outcome_(prefix_ + "outcome") {}

  // Announces this rank with `announcement`; returns the outcome: kAllCame, or why the roll call
  // failed.
  std::string run(const std::string& announcement) {
    store_.set(came(run_prefix_, t_.rank), store_bytes(announcement));
    const int64_t n = store_.add(count_, 1);
    if (n == t_.size) store_.set(outcome_, store_bytes(kAllCame));
    if (n < kClosed && !recorded_within(timeout_)) close();
    return store_text(store_.get(outcome_));
  }

 private:
  // Whether the outcome is recorded within `limit`. Polls with check(), every 5 ms at first and
  // at most every 100 ms, as the store's wait() leaves a client that timed out unusable.
  bool recorded_within(std::chrono::milliseconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    std::chrono::milliseconds pause(5);
    while (!store_.check({outcome_})) {
      if (std::chrono::steady_clock::now() >= deadline) return false;
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::milliseconds(100));
    }
    return true;
  }

  // Closes the roll call unless another rank did, and records its outcome unless every rank came.
  void close() {
    const int64_t n = store_.add(count_, kClosed);
    // Closed before: the closing rank records the outcome. Every rank came: the last records it.
    if (n >= 2 * kClosed || n - kClosed == t_.size) {
      recorded_within(timeout_);  // get() then waits its own timeout, at most
      return;
    }
    std::vector<int64_t> missing;
    for (int64_t rank = 0; rank < t_.size; ++rank) {
      if (!store_.check({came(run_prefix_, rank)})) missing.push_back(rank);
    }
    const std::string absent = missing.empty()
                                   ? fmt::format("only {} of {} ranks", n - kClosed, t_.size)
                                   : fmt::format("{} {}", missing.size() == 1 ? "rank" : "ranks",
                                                 fmt::join(missing, ", "));
    store_.set(outcome_, store_bytes(fmt::format(
                             "{} had not joined after {} s (resources.distributed_timeout_seconds, "
                             "or $CRUCIBLE_DIST_TIMEOUT): failed before joining, hung, or could "
                             "not reach the store",
                             absent, timeout_.count() / 1000.0)));
  }

  c10d::Store& store_;
  const std::string run_prefix_;
  const std::string prefix_;
  const Topology& t_;
  const std::chrono::milliseconds timeout_;
  const std::string count_;
  const std::string outcome_;
};

}  // namespace

void roll_call(c10d::Store& store, const std::string& prefix, const Topology& t,
               std::chrono::milliseconds timeout, const std::string& where, bool serves_store,
               const std::string& announcement, std::chrono::milliseconds linger) {
  std::string outcome;
  try {
    outcome = RollCall(store, prefix, t, timeout).run(announcement);
  } catch (const std::exception& e) {
    throw PeerLostError(fmt::format(
        "{} failed: the store stopped answering while this rank waited for the others to join "
        "({}); whoever serves it (rank 0 or the launcher) ended or cannot be reached",
        where, util::first_line(e)));
  }
  if (outcome == kAllCame) return;
  if (serves_store) std::this_thread::sleep_for(linger);
  throw PeerLostError(fmt::format("{} failed: {}", where, outcome));
}

std::string announced(c10d::Store& store, const std::string& prefix, int64_t rank) {
  return store_text(store.get(came(prefix, rank)));
}

}  // namespace crucible::dist
