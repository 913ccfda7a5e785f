#pragma once

// Crucible's readers of bytes that come from disk or from users, as fuzz targets: each is handed
// an input that may be anything. tools/fuzz.sh runs them under libFuzzer (clang, with
// AddressSanitizer and UndefinedBehaviorSanitizer); test_fuzz_corpus replays their seeds, the
// corpus kept in tests/fuzz/corpus/<name>/ and seeded damage of the seeds in every CTest run.
// The targets, each named where targets() lists it: the experiment file (experiment_config), a
// --set value (config_override), .safetensors files, torch.save archives (torch_dict) and the
// pickle in one (torch_pickle), IDX files, a TensorBoard event record, a checkpoint's
// metadata.json, experiment.jsonl as a resumed search replays it, a trial's metrics.jsonl as
// the search reads its result (trial_metrics), and a run's metrics.jsonl and an experiment.jsonl
// as `trainer report` shows them (run_report, experiment_report).

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
  void (*run)(std::string_view input);
  std::vector<std::string> (*seeds)();
};

// Every target, in a fixed order.
const std::vector<Target>& targets();

// The target called `name`. Throws std::invalid_argument listing the names when there is none.
const Target& target(std::string_view name);

}  // namespace crucible::fuzz
