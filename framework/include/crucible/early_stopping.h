#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <crucible/callback.h>
#include <crucible/metrics.h>

namespace crucible {

class TrialContext;

// Stops training when a validation metric stops improving: after `patience` validations in a row
// in which `metric` did not beat its best so far by more than `min_delta` (patience 0: the first
// such validation), it calls ctx.set_stop_requested() with the reason, and training ends with a
// final validation and checkpoint. `metric` is named as evaluate_batch names it or with its
// "validation_" prefix. Its best value and count of validations without improvement are saved in
// checkpoints, so a resumed run keeps its patience. The experiment file's `early_stopping` key
// adds one named "early_stopping".
class EarlyStopping : public Callback {
 public:
  // Throws Error when `metric` is empty, patience is negative or min_delta is negative.
  EarlyStopping(TrialContext& ctx, std::string metric, bool smaller_is_better = true,
                int64_t patience = 0, double min_delta = 0.0);

  // Throws TrainingError naming the metric and the metrics present when it is missing.
  void on_validation_end(const MetricValues& metrics) override;
  void save_state(torch::serialize::OutputArchive& archive) override;
  void load_state(torch::serialize::InputArchive& archive) override;

  std::optional<double> best() const { return best_; }
  int64_t validations_without_improvement() const { return bad_validations_; }

 private:
  TrialContext& ctx_;
  std::string metric_;
  bool smaller_is_better_;
  int64_t patience_;
  double min_delta_;
  std::optional<double> best_;
  int64_t bad_validations_ = 0;
};

}  // namespace crucible
