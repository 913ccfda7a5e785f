#pragma once

// The ranks' agreement on a stop signal.

#include <torch/torch.h>

#include <crucible/distributed.h>

#include "distributed/collectives.h"

namespace crucible::train {

// Agrees across the ranks of a run on whether a stop signal (StopSignals) was received, without
// making any rank wait: each vote is started after a batch and read after the next one, so a
// distributed run stops one batch after the signal. Every rank must call agreed() after every
// batch, and finish() before its last collectives.
class StopVote {
 public:
  explicit StopVote(const DistributedContext& dist) : dist_(dist) {}

  // The stop signal any rank had received before the previous call (0: none); the same on every
  // rank. On one rank, the signal received so far.
  int agreed();
  // Completes a vote still in flight.
  void finish();

 private:
  const DistributedContext& dist_;
  torch::Tensor vote_;  // this rank's signal, all-reduced (MAX) in the background
  c10::intrusive_ptr<c10d::Work> work_;
};

}  // namespace crucible::train
