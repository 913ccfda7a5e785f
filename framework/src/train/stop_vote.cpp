#include "train/stop_vote.h"

#include "train/stop_signals.h"

namespace crucible::train {

int StopVote::agreed() {
  const int sig = StopSignals::requested();
  if (!dist_.distributed()) return sig;
  if (work_) {
    detail::DistributedAccess::collectives(dist_)->wait(work_, "stop-signal allreduce");
    work_.reset();
    if (const int agreed = vote_.item<int>()) return agreed;
  } else {
    vote_ = torch::zeros({1}, torch::kInt);
  }
  vote_.fill_(sig);
  work_ = detail::DistributedAccess::collectives(dist_)->allreduce_async(vote_, ReduceOp::kMax);
  return 0;
}

void StopVote::finish() {
  if (work_) detail::DistributedAccess::collectives(dist_)->wait(work_, "stop-signal allreduce");
  work_.reset();
}

}  // namespace crucible::train
