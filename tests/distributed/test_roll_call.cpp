// dist::roll_call over a real TCPStore on loopback, each rank a thread with its own client: who
// returns, who throws, and what the error names.
#include <future>
#include <optional>

#include <fmt/format.h>

#include "catch.h"

#include <crucible/errors.h>

#include "distributed/c10d_compat.h"
#include "distributed/roll_call.h"
#include "process.h"

namespace crucible::dist {
namespace {

using std::chrono::milliseconds;

// A store served on a free port, and what each rank's roll call ended with ("" when it returned).
class World {
 public:
  explicit World(milliseconds timeout) : timeout_(timeout) {
    c10d::TCPStoreOptions options;
    options.port = 0;
    options.isServer = true;
    options.waitWorkers = false;
    options.timeout = std::chrono::seconds(30);
    server_ = open_tcp_store("127.0.0.1", options);
  }

  // Starts rank `rank` of `size` after `delay`, agreeing on `agreement`; rank 0 lingers as if it
  // served the store.
  void start(int64_t rank, int64_t size, milliseconds delay = milliseconds(0),
             const std::string& agreement = "") {
    ranks_.push_back(std::async(std::launch::async, [=] {
      std::this_thread::sleep_for(delay);
      c10d::TCPStoreOptions options;
      options.port = static_cast<std::uint16_t>(server_->getPort());
      options.isServer = false;
      options.timeout = std::chrono::seconds(30);
      auto store = open_tcp_store("127.0.0.1", options);
      Topology t;
      t.rank = rank;
      t.size = size;
      Agreement agreed;
      agreed.text = agreement;
      try {
        roll_call(*store, "run/", t, timeout_, fmt::format("rank {}", rank), rank == 0, "", agreed,
                  milliseconds(200));
        return std::string();
      } catch (const PeerLostError& e) {
        return std::string(e.what());
      } catch (const UsageError& e) {
        return "usage error: " + std::string(e.what());
      }
    }));
  }

  // What each rank started so far ended with, in the order started.
  std::vector<std::string> outcomes() {
    std::vector<std::string> out;
    for (auto& r : ranks_) out.push_back(r.get());
    return out;
  }

 private:
  milliseconds timeout_;
  c10::intrusive_ptr<c10d::TCPStore> server_;
  std::vector<std::future<std::string>> ranks_;
};

// Checks each of `outcomes` against `matcher`.
template <class Matcher>
void check_all(const std::vector<std::string>& outcomes, const Matcher& matcher) {
  for (const std::string& outcome : outcomes) {
    INFO(outcome);
    CHECK_THAT(outcome, matcher);
  }
}

}  // namespace

TEST_CASE("a roll call returns on every rank once all have come, in any order", "[dist]") {
  World world(milliseconds(10000));
  world.start(2, 3);
  world.start(0, 3, milliseconds(100));
  world.start(1, 3, milliseconds(300));
  for (const std::string& outcome : world.outcomes()) CHECK(outcome.empty());
}

TEST_CASE("a rank that never comes is named by every other rank after the timeout", "[dist]") {
  World world(milliseconds(3000));
  world.start(0, 4);
  world.start(2, 4, milliseconds(200));
  world.start(3, 4, milliseconds(400));  // times out last, after rank 0 closed the roll call
  const auto outcomes = world.outcomes();
  for (size_t i = 0; i < outcomes.size(); ++i) {
    INFO(outcomes[i]);
    CHECK_THAT(outcomes[i], Catch::StartsWith(fmt::format("rank {} failed: rank 1 had not joined "
                                                          "after 3 s",
                                                          i == 0 ? 0 : i + 1)));
  }
}

TEST_CASE("a rank that comes after the roll call closed fails with the others", "[dist]") {
  World world(milliseconds(500));
  world.start(0, 3);
  world.start(1, 3);
  world.start(2, 3, milliseconds(1500));
  const auto outcomes = world.outcomes();
  for (const std::string& outcome : outcomes) {
    CHECK_THAT(outcome, Catch::Contains("failed: rank 2 had not joined after 0.5 s"));
  }
}

TEST_CASE("a rank of another world size fails the roll call at once, on every rank", "[dist]") {
  // Two launchers told different slot counts: ranks 2 and 3 of 4 meet rank 0 of 2. Without the
  // comparison every rank would wait out the timeout and blame a rank 1 that never exists.
  World world(milliseconds(20000));
  const auto start = std::chrono::steady_clock::now();
  world.start(0, 2);
  world.start(2, 4, milliseconds(1000));
  world.start(3, 4, milliseconds(1000));
  const auto outcomes = world.outcomes();
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
  check_all(outcomes, Catch::StartsWith("usage error: rank ") &&
                          Catch::Contains("is one of 4 ranks, but rank 0 one of 2: every node's "
                                          "launcher must be given the same number of slots"));
}

TEST_CASE("a rank started otherwise fails the roll call at once, naming the difference", "[dist]") {
  World world(milliseconds(20000));
  world.start(0, 3, milliseconds(0), "seed: 1\nlr: 0.1\n");
  world.start(1, 3, milliseconds(1000), "seed: 1\nlr: 0.1\n");
  world.start(2, 3, milliseconds(2000), "seed: 1\nlr: 0.5\n");
  check_all(world.outcomes(),
            Catch::StartsWith("usage error: ") &&
                Catch::EndsWith("failed: rank 2 was started otherwise than rank 0 (rank 0's -> "
                                "rank 2's): line 2: 'lr: 0.1' -> 'lr: 0.5'"));
}

TEST_CASE("a second process of one rank is refused by name", "[dist]") {
  World world(milliseconds(20000));
  world.start(0, 3);
  world.start(1, 3, milliseconds(100));
  world.start(1, 3, milliseconds(300));
  check_all(world.outcomes(),
            Catch::Contains("failed: rank 1 came twice: two processes were started as rank 1 (two "
                            "launchers given the same --node-rank"));
}

TEST_CASE("a rank that agrees joins, and one that differs after all came fails alone", "[dist]") {
  World world(milliseconds(20000));
  world.start(0, 2, milliseconds(0), "a");
  world.start(1, 2, milliseconds(0), "a");
  world.start(2, 3, milliseconds(1500), "a");
  const auto outcomes = world.outcomes();
  CHECK(outcomes[0].empty());
  CHECK(outcomes[1].empty());
  CHECK_THAT(outcomes[2], Catch::Contains("rank 2 is one of 3 ranks, but rank"));
}

TEST_CASE("first_difference names the first line that differs", "[dist]") {
  CHECK(first_difference("a\nb\nc", "a\nx\nc") == "line 2: 'b' -> 'x'");
  CHECK(first_difference("a\nb", "a\nb\nc") == "line 3: '(none)' -> 'c'");
  CHECK(first_difference("a\n", "a") == "only the last line's end differs");
}

}  // namespace crucible::dist
