#include "train/stop_vote.h"

#include "train/stop_signals.h"

namespace crucible::train {

int StopVote::agreed(bool requested) {
  const int sig = StopSignals::requested();
  if (!dist_.distributed()) return sig != 0 ? sig : requested ? kRequested : 0;
  if (work_) {
    detail::DistributedAccess::collectives(dist_)->wait(work_, "stop-signal allreduce");
    work_.reset();
    // Elementwise MAX over the ranks: {signal, requested}.
    const int* agreed = vote_.data_ptr<int>();
    if (agreed[0] != 0) return agreed[0];
    if (agreed[1] != 0) return kRequested;
  } else {
    vote_ = torch::zeros({2}, torch::kInt);
  }
  int* mine = vote_.data_ptr<int>();
  mine[0] = sig;
  mine[1] = requested ? 1 : 0;
  work_ = detail::DistributedAccess::collectives(dist_)->allreduce_async(vote_, ReduceOp::kMax);
  return 0;
}

void StopVote::finish() {
  if (work_) detail::DistributedAccess::collectives(dist_)->wait(work_, "stop-signal allreduce");
  work_.reset();
}

}  // namespace crucible::train
