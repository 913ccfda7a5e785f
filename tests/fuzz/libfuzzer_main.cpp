// The libFuzzer binary of the fuzz targets: it fuzzes the one named by $CRUCIBLE_FUZZ_TARGET. An
// input that makes the target throw anything but crucible::Error aborts, so libFuzzer keeps it as
// a crash. Without that variable it prints the targets' names, one a line, and exits; with
// CRUCIBLE_FUZZ_SEEDS=DIR too it writes the target's seeds there (seed-<i>) and exits.

#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <stdexcept>

#include <crucible/errors.h>

#include "files.h"
#include "fuzz_targets.h"

namespace {

const crucible::fuzz::Target* fuzzed = nullptr;

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* name = std::getenv("CRUCIBLE_FUZZ_TARGET");
  if (!name) {
    for (const auto& t : crucible::fuzz::targets()) std::cout << t.name << "\n";
    std::exit(0);
  }
  try {
    fuzzed = &crucible::fuzz::target(name);
  } catch (const std::invalid_argument& e) {
    std::cerr << "CRUCIBLE_FUZZ_TARGET: " << e.what() << "\n";
    std::exit(2);
  }
  if (const char* dir = std::getenv("CRUCIBLE_FUZZ_SEEDS")) {
    const auto seeds = fuzzed->seeds();
    for (size_t i = 0; i < seeds.size(); ++i) {
      crucible::testing::write_file(std::string(dir) + "/seed-" + std::to_string(i), seeds[i]);
    }
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    fuzzed->run(std::string_view(reinterpret_cast<const char*>(data), size));
  } catch (const crucible::Error&) {
    // the refusal a user sees
  } catch (const std::exception& e) {
    std::cerr << "escaped as " << typeid(e).name() << ": " << e.what() << "\n";
    std::abort();
  }
  return 0;
}
