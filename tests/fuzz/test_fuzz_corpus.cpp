// The fuzz targets in every CTest run: each accepts its seeds, and refuses every input of its
// corpus (tests/fuzz/corpus/<target>/: the inputs libFuzzer kept for reaching new code, and a
// regression-* input for each bug it found) and seeded damage of its seeds with a crucible::Error
// or not at all.
#include "catch.h"

#include <crucible/errors.h>

#include "damage.h"
#include "files.h"
#include "fuzz_targets.h"
#include "util/file_system.h"

using namespace crucible::testing;
namespace fs = crucible::util;

namespace {

// "" when `target` returns on `input` or throws crucible::Error, else what escaped.
std::string escaped(const crucible::fuzz::Target& target, const std::string& input) {
  try {
    target.run(input);
  } catch (const crucible::Error&) {
  } catch (const std::exception& e) {
    return typeid(e).name() + std::string(": ") + e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("each fuzz target accepts its seeds and refuses damage with a crucible::Error",
          "[fuzz]") {
  for (const auto& target : crucible::fuzz::targets()) {
    DYNAMIC_SECTION(target.name) {
      const auto seeds = target.seeds();
      REQUIRE(!seeds.empty());
      for (const std::string& seed : seeds) CHECK_NOTHROW(target.run(seed));

      const std::string corpus = fs::join(CRUCIBLE_TEST_DATA, "fuzz/corpus/" + target.name);
      REQUIRE(fs::is_directory(corpus));
      int inputs = 0;
      for (const std::string& name : fs::list_directory(corpus)) {
        INFO("corpus/" << target.name << "/" << name);
        CHECK(escaped(target, read_file(fs::join(corpus, name))) == "");
        ++inputs;
      }
      CHECK(inputs > 0);

      std::mt19937_64 rng(20261125);
      for (size_t s = 0; s < seeds.size(); ++s) {
        for (int i = 0; i < 200; ++i) {
          const std::string bad = damaged_copy(seeds[s], i, rng);
          INFO("damage " << i << " of seed " << s);
          CHECK(escaped(target, bad) == "");
        }
      }
    }
  }
}
