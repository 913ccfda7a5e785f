#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <crucible/distributed.h>
#include <crucible/metrics.h>

namespace crucible::metrics {

// Reduces evaluate_batch metrics over a validation pass. Tensors stay where they are until
// result(); kAvg is weighted by batch length.
class ValidationAccumulator {
 public:
  explicit ValidationAccumulator(EvaluationReducer reducer) : reducer_(std::move(reducer)) {}
  // Adds one batch. Throws TrainingError when its keys differ from the first batch's or a metric
  // is not a one-element tensor.
  void add(const Metrics& batch_metrics, int64_t batch_length, int64_t batch_idx);
  // The reduced metrics (empty when no batch was added).
  MetricValues result() const;
  // What this accumulator holds before the final division, for reduction across ranks:
  // {"records": n, "batches": b, "sums": {name: record-weighted sum (AVG), sum, max or min}}.
  nlohmann::json partial() const;

 private:
  EvaluationReducer reducer_;
  std::map<std::string, torch::Tensor> acc_;
  int64_t records_ = 0;
  int64_t batches_ = 0;
};

// Averages train_batch metrics over a reporting period. add() computes nothing: it keeps each
// value detached where it lies (copied only when it is a view into a larger tensor, which it
// would otherwise keep alive). The values are summed in doubles, in the order added, when a
// result, the state or first_non_finite() is asked for: CPU values are read in place, the others
// copied to the host at once, per metric.
// With skip_non_finite, non-finite values are left out of the means (a metric whose every value
// was non-finite has mean NaN); without, one makes its mean non-finite and first_non_finite()
// names the batch.
class TrainingAccumulator {
 public:
  explicit TrainingAccumulator(bool skip_non_finite = false) : skip_non_finite_(skip_non_finite) {}

  // Adds one batch's metrics. Throws TrainingError naming the metric when one is not a
  // one-element tensor.
  void add(const Metrics& batch_metrics, int64_t batch_idx);
  // Adds n to the count `name`, reported as the sum over the period (not a mean).
  void add_count(const std::string& name, int64_t n) { counts_[name] += n; }
  bool empty() const { return batches_ == 0; }
  int64_t batches() const { return batches_; }
  // Mean of each metric over the batches that reported it, and each count; resets the
  // accumulator.
  MetricValues flush();
  // The same means, without resetting.
  MetricValues peek() const;
  // What peek() divides: {"sums": {name: [sum, count]}, "counts": {name: n}}, the count being
  // that of the values summed (with skip_non_finite, the finite ones).
  nlohmann::json partials() const;
  // Drops what was added.
  void reset();
  // The first batch of the period whose value of `name` was not finite; -1 when none was, with
  // skip_non_finite, or when it lies before restore() (whose sums were finite: checkpoints are
  // written only then).
  int64_t first_non_finite(const std::string& name) const;
  // The pending sums as JSON (exact: doubles round-trip), for checkpoints; and back. A period
  // summed partly before state() and partly after restore() has the sums it would have had
  // without them.
  nlohmann::json state() const;
  void restore(const nlohmann::json& state);

 private:
  struct Entry {
    std::optional<double> sum;  // of the values summed; with skip_non_finite, of the finite ones
    int64_t count = 0;          // values added
    int64_t finite = 0;         // skip_non_finite: how many values summed were finite
    int64_t first_non_finite = -1;         // without skip_non_finite: its batch, since restore()
    std::vector<torch::Tensor> pending;    // added, not summed yet
    std::vector<int64_t> pending_batches;  // their batches
  };
  // Sums the pending values of `e`, in the order added.
  void sum_pending(Entry& e) const;
  // Sums every entry's pending values; changes no result (means, state) this class gives.
  void sum_all_pending() const;

  bool skip_non_finite_;
  mutable std::map<std::string, Entry> sums_;
  std::map<std::string, int64_t> counts_;
  int64_t batches_ = 0;
};

// The metrics of all ranks' ValidationAccumulator::partial(), in rank order, reduced as one
// accumulator over all their batches would have. Ranks without batches are skipped. Throws
// TrainingError naming the ranks and their keys when ranks with batches report different
// metrics.
MetricValues combine_partials(const std::vector<nlohmann::json>& partials,
                              const EvaluationReducer& reducer);

// Each training metric over the ranks of `dist`, each contributing `training`'s period: a mean's
// sum and count are added up over the ranks (a rank whose batches did not return the metric
// contributes none, and one with more values counts more), a count (add_count) is averaged over
// the ranks. Returns training.peek() on one rank. Every rank must call it.
MetricValues across_ranks(const DistributedContext& dist, const TrainingAccumulator& training);

// Metrics as plain doubles, or a TrainingError naming the metric that is not a 1-element tensor.
MetricValues to_values(const Metrics& metrics, const std::string& where);

}  // namespace crucible::metrics
