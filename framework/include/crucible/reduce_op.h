#pragma once

namespace crucible {

// How several values become one: the tensors of all ranks in a collective
// (DistributedContext::allreduce), or the per-batch values of a validation metric
// (EvaluationReducer).
enum class ReduceOp {
  kSum,
  // A collective: the mean over ranks. A validation metric: the mean over records, each batch
  // weighted by its length (Trial::get_batch_length), so an uneven last batch still gives the
  // exact dataset mean.
  kAvg,
  kMin,
  kMax,
};

}  // namespace crucible
