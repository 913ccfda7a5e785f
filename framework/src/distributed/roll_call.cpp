#include "distributed/roll_call.h"

#include <algorithm>
#include <optional>
#include <sstream>
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
// Starts an outcome that a rank's own start-up caused (exit 2, UsageError), not a lost peer.
const std::string kRefused = "refused: ";

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
  std::string run(const std::string& announcement, const Agreement& agreement) {
    // Compared first, so that a second process of a rank cannot replace its announcement.
    if (const auto why = disagreement(agreement)) return refuse(*why);
    store_.set(came(run_prefix_, t_.rank), store_bytes(announcement));
    const int64_t n = store_.add(count_, 1);
    // The first outcome recorded stands (a refusal, all came, or who had not come).
    if (n == t_.size) store_.compareSet(outcome_, {}, store_bytes(kAllCame));
    if (n < kClosed && !recorded_within(timeout_)) close();
    return store_text(store_.get(outcome_));
  }

 private:
  // Why this rank cannot join the ranks that came before it, compared with the first to come;
  // nullopt when it can.
  std::optional<std::string> disagreement(const Agreement& agreement) {
    const std::string rank = std::to_string(t_.rank);
    if (store_.add(prefix_ + "arrivals-of-rank-" + rank, 1) > 1) {
      return fmt::format(
          "rank {0} came twice: two processes were started as rank {0} (two launchers given the "
          "same --node-rank, or two processes the same RANK)",
          rank);
    }
    const std::string mine = fmt::format("{} {}\n{}", rank, t_.size, agreement.text);
    const std::string first =
        store_text(store_.compareSet(prefix_ + "first", {}, store_bytes(mine)));
    if (first == mine) return std::nullopt;  // this rank came first
    const size_t space = first.find(' ');
    const size_t newline = first.find('\n');
    TORCH_INTERNAL_ASSERT(space < newline && newline != std::string::npos);
    const std::string first_rank = first.substr(0, space);
    const std::string first_size = first.substr(space + 1, newline - space - 1);
    if (first_size != std::to_string(t_.size)) {
      return fmt::format(
          "rank {} is one of {} ranks, but rank {} one of {}: every node's launcher must be "
          "given the same number of slots and nodes",
          rank, t_.size, first_rank, first_size);
    }
    const std::string theirs = first.substr(newline + 1);
    if (theirs == agreement.text) return std::nullopt;
    return fmt::format(
        "rank {} was started otherwise than rank {} (rank {}'s -> rank {}'s): {}", rank, first_rank,
        first_rank, rank,
        agreement.describe ? agreement.describe(theirs) : first_difference(theirs, agreement.text));
  }

  // Ends the roll call for every rank with `why` (unless it ended already: then for this rank
  // alone); returns the outcome for this rank.
  std::string refuse(const std::string& why) {
    store_.add(count_, kClosed);  // a rank yet to come finds the roll call closed
    store_.compareSet(outcome_, {}, store_bytes(kRefused + why));
    return kRefused + why;
  }

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
    store_.compareSet(outcome_, {},
                      store_bytes(fmt::format(
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

std::string first_difference(const std::string& theirs, const std::string& mine) {
  std::istringstream their_lines(theirs), my_lines(mine);
  std::string their_line, my_line;
  for (size_t line = 1;; ++line) {
    const bool theirs_go_on = static_cast<bool>(std::getline(their_lines, their_line));
    const bool mine_go_on = static_cast<bool>(std::getline(my_lines, my_line));
    if (!theirs_go_on && !mine_go_on) return "only the last line's end differs";
    if (!theirs_go_on || !mine_go_on || their_line != my_line) {
      return fmt::format("line {}: '{}' -> '{}'", line, theirs_go_on ? their_line : "(none)",
                         mine_go_on ? my_line : "(none)");
    }
  }
}

void roll_call(c10d::Store& store, const std::string& prefix, const Topology& t,
               std::chrono::milliseconds timeout, const std::string& where, bool serves_store,
               const std::string& announcement, const Agreement& agreement,
               std::chrono::milliseconds linger) {
  std::string outcome;
  try {
    outcome = RollCall(store, prefix, t, timeout).run(announcement, agreement);
  } catch (const std::exception& e) {
    throw PeerLostError(fmt::format(
        "{} failed: the store stopped answering while this rank waited for the others to join "
        "({}); whoever serves it (rank 0 or the launcher) ended or cannot be reached",
        where, util::first_line(e)));
  }
  if (outcome == kAllCame) return;
  if (serves_store) std::this_thread::sleep_for(linger);
  if (outcome.rfind(kRefused, 0) == 0) {
    throw UsageError(fmt::format("{} failed: {}", where, outcome.substr(kRefused.size())));
  }
  throw PeerLostError(fmt::format("{} failed: {}", where, outcome));
}

std::string announced(c10d::Store& store, const std::string& prefix, int64_t rank) {
  return store_text(store.get(came(prefix, rank)));
}

}  // namespace crucible::dist
