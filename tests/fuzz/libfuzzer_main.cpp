// A libFuzzer binary for the target named by CRUCIBLE_FUZZ_TARGET (a compile definition): an
// input that makes the target throw anything but crucible::Error aborts, so libFuzzer keeps it as
// a crash. Setting CRUCIBLE_FUZZ_SEEDS=DIR writes the target's seeds there (seed-<i>) and exits.

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iostream>

#include <crucible/errors.h>

#include "fuzz_targets.h"

namespace {

const crucible::fuzz::Target& fuzzed() {
  static const crucible::fuzz::Target& t = crucible::fuzz::target(CRUCIBLE_FUZZ_TARGET);
  return t;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* dir = std::getenv("CRUCIBLE_FUZZ_SEEDS")) {
    const auto seeds = fuzzed().seeds();
    for (size_t i = 0; i < seeds.size(); ++i) {
      std::ofstream(std::string(dir) + "/seed-" + std::to_string(i), std::ios::binary) << seeds[i];
    }
    std::cout << seeds.size() << " seeds of " << fuzzed().name << " written to " << dir << "\n";
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    fuzzed().run(std::string_view(reinterpret_cast<const char*>(data), size));
  } catch (const crucible::Error&) {
    // the refusal a user sees
  } catch (const std::exception& e) {
    std::cerr << "escaped as " << typeid(e).name() << ": " << e.what() << "\n";
    std::abort();
  }
  return 0;
}
