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

  // Starts rank `rank` of `size` after `delay`; rank 0 lingers as if it served the store.
  void start(int64_t rank, int64_t size, milliseconds delay = milliseconds(0)) {
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
      try {
        roll_call(*store, "run/", t, timeout_, fmt::format("rank {}", rank), rank == 0, "",
                  milliseconds(200));
        return std::string();
      } catch (const PeerLostError& e) {
        return std::string(e.what());
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

}  // namespace

TEST_CASE("a roll call returns on every rank once all have come, in any order", "[dist]") {
  World world(milliseconds(10000));
  world.start(2, 3);
  world.start(0, 3, milliseconds(100));
  world.start(1, 3, milliseconds(300));
  for (const std::string& outcome : world.outcomes()) CHECK(outcome.empty());
}

TEST_CASE("a rank that never comes is named by every other rank after the timeout", "[dist]") {
  World world(milliseconds(1000));
  world.start(0, 4);
  world.start(2, 4, milliseconds(200));
  world.start(3, 4, milliseconds(400));  // times out last, after rank 0 closed the roll call
  const auto outcomes = world.outcomes();
  for (size_t i = 0; i < outcomes.size(); ++i) {
    INFO(outcomes[i]);
    CHECK_THAT(outcomes[i], Catch::StartsWith(fmt::format("rank {} failed: rank 1 had not joined "
                                                          "after 1 s",
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

}  // namespace crucible::dist
