#include "train/stop_vote.h"

#include <signal.h>

#include "train/stop_signals.h"

namespace crucible::train {

int StopVote::agreed(bool requested, bool console_lost) {
  const int sig = StopSignals::requested();
  const auto decide = [](int signal, bool lost, bool asked) {
    return signal != 0 ? signal : lost ? SIGPIPE : asked ? kRequested : 0;
  };
  held_request_ = false;
  if (!dist_.distributed()) {
    held_request_ = requested;
    return decide(sig, console_lost, requested);
  }
  if (carried_) {
    carried_ = false;
    held_request_ = true;
    return kRequested;
  }
  if (work_) {
    detail::DistributedAccess::collectives(dist_)->wait(work_, "stop-signal allreduce");
    work_.reset();
    // Elementwise MAX over the ranks: {signal, console lost, requested}.
    const int* agreed = vote_.data_ptr<int>();
    held_request_ = agreed[2] != 0;
    if (const int decision = decide(agreed[0], agreed[1] != 0, agreed[2] != 0)) return decision;
  } else {
    vote_ = torch::zeros({3}, torch::kInt);
  }
  int* mine = vote_.data_ptr<int>();
  mine[0] = sig;
  mine[1] = console_lost ? 1 : 0;
  mine[2] = requested ? 1 : 0;
  work_ = detail::DistributedAccess::collectives(dist_)->allreduce_async(vote_, ReduceOp::kMax);
  return 0;
}

void StopVote::finish() {
  if (work_) detail::DistributedAccess::collectives(dist_)->wait(work_, "stop-signal allreduce");
  work_.reset();
}

}  // namespace crucible::train
