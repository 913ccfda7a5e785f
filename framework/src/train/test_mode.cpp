#include "train/test_mode.h"

#include <vector>

#include <crucible/errors.h>

#include "checkpoint/checkpoint.h"

namespace crucible::train {

void check_checkpoint_round_trip(TrialSession& session, const std::string& dir, int64_t batches,
                                 int64_t rank) {
  const auto& models = session.contents().models;
  std::vector<torch::Tensor> before;
  for (const auto& m : models) {
    torch::NoGradGuard g;
    for (auto& p : m->parameters()) {
      before.push_back(p.detach().clone());
      p.add_(1.0);
    }
  }
  const checkpoint::Metadata meta =
      checkpoint::load(dir, session.contents(), rank, session.state().device);
  size_t i = 0;
  for (const auto& m : models) {
    for (const auto& p : m->parameters()) {
      if (!torch::equal(p.detach(), before[i++])) {
        throw TrainingError("test mode: a parameter differs after loading checkpoint " + dir);
      }
    }
  }
  if (meta.batches != batches) {
    throw TrainingError("test mode: checkpoint " + dir + " restored wrong counters");
  }
}

}  // namespace crucible::train
