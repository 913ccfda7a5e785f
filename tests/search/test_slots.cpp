// How a search splits this machine between trials running at once (search/slots.h).
#include "catch.h"

#include "search/slots.h"

using crucible::search::local_slots;
using crucible::search::Slot;
using crucible::search::slot_limit;

namespace {

std::vector<int> range(int n) {
  std::vector<int> out;
  for (int i = 0; i < n; ++i) out.push_back(i);
  return out;
}

std::vector<std::string> devices(const std::vector<Slot>& slots) {
  std::vector<std::string> out;
  for (const Slot& s : slots) out.push_back(s.cuda_devices);
  return out;
}

}  // namespace

TEST_CASE("each trial gets GPUs of its own, slots_per_trial of them", "[search][slots]") {
  auto slots = local_slots(range(16), 4, 1);
  CHECK(devices(slots) == std::vector<std::string>{"0", "1", "2", "3"});
  CHECK(slots[1].cpus == std::vector<int>{4, 5, 6, 7});
  CHECK(slots[3].threads == 4);

  slots = local_slots(range(16), 4, 2);
  CHECK(devices(slots) == std::vector<std::string>{"0,1", "2,3"});
  CHECK(slots[1].cpus.front() == 8);
  CHECK(slots[1].threads == 4);  // 8 cores for 2 ranks

  // A GPU that completes no trial's set is left idle rather than shared.
  CHECK(devices(local_slots(range(16), 3, 2)) == std::vector<std::string>{"0,1"});
  // A trial of more slots than the machine has GPUs gets them all, its ranks sharing them.
  CHECK(devices(local_slots(range(16), 1, 2)) == std::vector<std::string>{"0"});
  CHECK(devices(local_slots(range(2), 1, 1)) == std::vector<std::string>{"0"});
}

TEST_CASE("without GPUs each trial gets cores of its own, in the order allowed",
          "[search][slots]") {
  const std::vector<int> allowed = {2, 3, 5, 7, 11, 13, 17, 19};
  const auto slots = local_slots(allowed, 0, 2);
  REQUIRE(slots.size() == 4);
  CHECK(slots[0].cpus == std::vector<int>{2, 3});
  CHECK(slots[3].cpus == std::vector<int>{17, 19});
  CHECK(slots[2].cuda_devices.empty());
  CHECK(slots[2].threads == 1);
  // Fewer cores than a trial's slots: one slot, one thread a rank.
  const auto one = local_slots({0}, 0, 4);
  REQUIRE(one.size() == 1);
  CHECK(one[0].cpus == std::vector<int>{0});
  CHECK(one[0].threads == 1);
}

TEST_CASE("a search says why the machine runs fewer trials at once than allowed",
          "[search][slots]") {
  CHECK(slot_limit(1, 2, 1, 1, 16) ==
        " (2 allowed, and this machine's 1 GPU(s) hold 1 trial(s) of 1 GPU(s))");
  CHECK(slot_limit(2, 8, 1, 0, 2) ==
        " (8 allowed, and the 2 core(s) this process may use hold 2 trial(s) of 1 slot(s))");
  CHECK(slot_limit(4, 4, 1, 4, 16).empty());
  CHECK(slot_limit(4, 2, 1, 0, 4).empty());
}
