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
    const int agreed_signal = vote_[0].item<int>();
    if (agreed_signal != 0) return agreed_signal;
    if (vote_[1].item<int>() != 0) return kRequested;
  } else {
    vote_ = torch::zeros({2}, torch::kInt);
  }
  vote_[0].fill_(sig);
  vote_[1].fill_(requested ? 1 : 0);
  work_ = detail::DistributedAccess::collectives(dist_)->allreduce_async(vote_, ReduceOp::kMax);
  return 0;
}

void StopVote::finish() {
  if (work_) detail::DistributedAccess::collectives(dist_)->wait(work_, "stop-signal allreduce");
  work_.reset();
}

}  // namespace crucible::train
