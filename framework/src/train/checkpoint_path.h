#pragma once

// The checkpoint a user names on the command line.

#include <functional>
#include <memory>
#include <string>

#include "checkpoint/checkpoint.h"

namespace crucible::train {

// The checkpoint directory that `given`, the value of option `flag` (--checkpoint,
// --warm-start), names: a checkpoint directory (it holds metadata.json) names itself; a run
// directory (config.yaml, no experiment.jsonl) its newest good checkpoint
// (checkpoint::newest_good, which reports each damaged newer one through `warn`); an experiment
// directory, or its `best` file, the best checkpoint the search recorded there; a run's `latest`
// file the checkpoint it names, a checkpoint's metadata.json that checkpoint. Throws UsageError
// naming `flag` when `given` is empty, does not exist, is none of those, or is an experiment with
// no best checkpoint yet, and the errors of newest_good.
std::string checkpoint_path(const std::string& given, const std::string& flag,
                            const std::function<void(const std::string&)>& warn);

// A checkpoint directory and the pin (checkpoint::pin) that keeps the run writing it from
// deleting it while this object lives. An empty `dir` (no checkpoint) has no pin.
struct PinnedCheckpoint {
  std::string dir;
  std::unique_ptr<checkpoint::Pin> pin;
};

// The checkpoint resolve() returns, pinned. When it is deleted before the pin takes hold (its run,
// still training, removed it under retention), resolve() is called again, up to 10 times in all.
// Throws what resolve() throws, and TrainingError naming the checkpoint when resolve() gives the
// one just deleted again (a checkpoint named itself) or every call's was deleted.
PinnedCheckpoint pin_resolved(const std::function<std::string()>& resolve);

}  // namespace crucible::train
