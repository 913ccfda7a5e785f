#pragma once

// The ranks' agreement on a stop signal.

#include <torch/torch.h>

#include <crucible/distributed.h>

#include "distributed/collectives.h"

namespace crucible::train {

// Agrees across the ranks of a run on whether a stop signal (StopSignals) was received or a
// trial asked to stop, without making any rank wait: each vote is started after a batch and read
// after the next one, so a distributed run stops one batch after the signal or request. Every
// rank must call agreed() after every batch, and finish() before its last collectives.
class StopVote {
 public:
  // What agreed() returns for a trial's request (TrialContext::set_stop_requested); signal
  // numbers are below it.
  static constexpr int kRequested = 1000;

  explicit StopVote(const DistributedContext& dist) : dist_(dist) {}

  // The stop signal any rank had received before the previous call, else SIGPIPE when a rank's
  // `console_lost` (its console's reader went away: util::Logger::console_lost) was true then,
  // else kRequested when a rank's `requested` was, else 0; the same on every rank. On one rank,
  // the same of the signal received so far and of this call's arguments.
  int agreed(bool requested, bool console_lost);
  // Completes a vote still in flight.
  void finish();
  // Whether the decision the last agreed() returned counted a rank's request (whatever it
  // returned: a signal wins over a request).
  bool held_request() const { return held_request_; }
  // Makes the next agreed() return kRequested on every rank, as the vote a checkpoint was taken
  // during would have: for a distributed run resumed from it (every rank calls it, or none).
  void carry_request() { carried_ = true; }

 private:
  const DistributedContext& dist_;
  torch::Tensor vote_;  // this rank's {signal, console lost, requested} (CPU), all-reduced (MAX) in
                        // the background
  c10::intrusive_ptr<c10d::Work> work_;
  bool carried_ = false;
  bool held_request_ = false;
};

}  // namespace crucible::train
