#pragma once

#include <map>
#include <string>
#include <type_traits>
#include <vector>

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <crucible/reduce_op.h>

namespace crucible {

// One metric of a batch: a one-element tensor, or a plain number (bool, integer or floating
// point), which becomes a 0-dimensional double tensor on the CPU. A tensor is kept as it is (it
// may stay on the device, with no host synchronisation per batch); Crucible reads it at reporting
// boundaries only.
class MetricValue : public torch::Tensor {
 public:
  MetricValue() = default;
  MetricValue(torch::Tensor tensor) : torch::Tensor(std::move(tensor)) {}  // NOLINT
  template <class Number, std::enable_if_t<std::is_arithmetic_v<Number>, int> = 0>
  MetricValue(Number number)  // NOLINT(google-explicit-constructor)
      : torch::Tensor(torch::scalar_tensor(static_cast<double>(number), torch::kDouble)) {}
};

// Metrics of one batch (or of a whole evaluation): name -> value, `return {{"loss", loss},
// {"accuracy", 0.5}};`.
using Metrics = std::map<std::string, MetricValue>;

// Reduced metrics: one number per name. A validation's result (Trainer::validate,
// FitResult::last_validation, Callback::on_validation_end) and a training report's means.
using MetricValues = std::map<std::string, double>;

// The metric `name` of a validation's result `values`, named as evaluate_batch names it ("loss")
// or with its prefix ("validation_loss"). Throws TrainingError naming `user` (who asks), the
// metric and the metrics present when it is missing.
double validation_metric(const MetricValues& values, const std::string& name,
                         const std::string& user);

// `values` as a JSON object, as metrics.jsonl writes them: a NaN as null and an infinity as the
// string "inf" or "-inf", JSON having neither.
nlohmann::json metrics_json(const MetricValues& values);

// The reducer of each validation metric: one for all, or per metric name with a default.
class EvaluationReducer {
 public:
  EvaluationReducer(ReduceOp all = ReduceOp::kAvg) : default_(all) {}  // NOLINT
  EvaluationReducer(std::map<std::string, ReduceOp> per_metric,        // NOLINT
                    ReduceOp fallback = ReduceOp::kAvg)
      : default_(fallback), per_metric_(std::move(per_metric)) {}
  ReduceOp for_metric(const std::string& name) const {
    auto it = per_metric_.find(name);
    return it == per_metric_.end() ? default_ : it->second;
  }

 private:
  ReduceOp default_;
  std::map<std::string, ReduceOp> per_metric_;
};

// A validation metric that per-batch reduction cannot give exactly (a median, an AUC, an F1 over
// the whole set), computed in two phases so that it is exact across ranks. The trial creates it,
// registers it with TrialContext::wrap_reducer, and feeds it from evaluate_batch through methods
// of its own (an `update`, say). For every validation pass Crucible calls, on every rank: reset()
// before the first batch; per_slot_reduce() after the last; then cross_slot_reduce() with every
// rank's per_slot_reduce() result in rank order. The value is reported as validation_<name>.
class MetricReducer {
 public:
  virtual ~MetricReducer() = default;
  // Forgets what the previous pass fed it.
  virtual void reset() = 0;
  // This rank's summary of what it was fed since reset(), as JSON (a rank may have seen no
  // batch).
  virtual nlohmann::json per_slot_reduce() = 0;
  // The metric from all ranks' summaries (one on a one-process run). Runs on every rank with the
  // same input, so every rank gets the same value.
  virtual double cross_slot_reduce(const std::vector<nlohmann::json>& per_slot) = 0;
};

}  // namespace crucible
