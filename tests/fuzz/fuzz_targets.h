#pragma once

// Crucible's readers of bytes that come from disk or from users, as fuzz targets: each is handed
// an input that may be anything. tools/fuzz.sh runs them under libFuzzer (clang, with
// AddressSanitizer and UndefinedBehaviorSanitizer); test_fuzz_corpus replays their seeds, the
// corpus kept in tests/fuzz/corpus/<name>/ and seeded damage of the seeds in every CTest run.

#include <string>
#include <string_view>
#include <vector>

namespace crucible::fuzz {

// One reader. `run` reads `input` the way Crucible reads such a file or value. It returns or
// throws crucible::Error, whose message is what the user sees; any other exception, a crash, a
// hang or a sanitizer report is a bug in the reader. `seeds` are well-formed inputs (run accepts
// each without throwing), the start of a corpus.
struct Target {
  std::string name;
  std::string reads;  // what it reads, in a few words
  void (*run)(std::string_view input);
  std::vector<std::string> (*seeds)();
  // How many seeded damages of each seed CTest reads. Fewer where LibTorch reads the input: its
  // errors capture a stack trace each, about 0.1 to 0.3 s on LibTorch 1.13.
  int damages = 200;
};

// Every target, in a fixed order.
const std::vector<Target>& targets();

// The target called `name`. Throws std::invalid_argument listing the names when there is none.
const Target& target(std::string_view name);

}  // namespace crucible::fuzz
