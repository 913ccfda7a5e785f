#pragma once

#include <map>
#include <string>
#include <vector>

#include <torch/torch.h>
#include <nlohmann/json.hpp>

namespace crucible {

// Metrics of one batch (or of a whole evaluation): name -> scalar tensor. Tensors may stay on the
// device; Crucible reads them at reporting boundaries only.
using Metrics = std::map<std::string, torch::Tensor>;

// How per-batch validation metrics become one value. AVG is weighted by each batch's length
// (Trial::get_batch_length), so an uneven last batch still gives the exact dataset mean.
enum class Reducer { AVG, SUM, MAX, MIN };

// The reducer of each validation metric: one for all, or per metric name with a default.
class EvaluationReducer {
 public:
  EvaluationReducer(Reducer all = Reducer::AVG) : default_(all) {}  // NOLINT
  EvaluationReducer(std::map<std::string, Reducer> per_metric,      // NOLINT
                    Reducer fallback = Reducer::AVG)
      : default_(fallback), per_metric_(std::move(per_metric)) {}
  Reducer for_metric(const std::string& name) const {
    auto it = per_metric_.find(name);
    return it == per_metric_.end() ? default_ : it->second;
  }

 private:
  Reducer default_;
  std::map<std::string, Reducer> per_metric_;
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
