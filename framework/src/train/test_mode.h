#pragma once

// The checkpoint round trip of `trainer fit --test-mode`.

#include <cstdint>
#include <string>

#include "train/session.h"

namespace crucible::train {

// Perturbs every parameter of the session's models, restores checkpoint `dir` (written at
// `batches`) into the session, and checks that every parameter is back and the checkpoint's
// counters are right. `rank` picks this process's generator states. Throws TrainingError
// naming the checkpoint when the round trip does not hold.
void check_checkpoint_round_trip(TrialSession& session, const std::string& dir, int64_t batches,
                                 int64_t rank);

}  // namespace crucible::train
