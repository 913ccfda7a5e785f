#pragma once

#include <map>
#include <string>

#include <torch/torch.h>

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

}  // namespace crucible
