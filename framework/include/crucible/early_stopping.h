#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <torch/arg.h>

#include <crucible/callback.h>
#include <crucible/metrics.h>

namespace crucible {

class TrialContext;

struct EarlyStoppingOptions {
  // The validation metric to watch, named as evaluate_batch names it or with its "validation_"
  // prefix.
  explicit EarlyStoppingOptions(std::string metric) : metric_(std::move(metric)) {}
  TORCH_ARG(std::string, metric);
  // Whether a smaller value of the metric is the better one.
  TORCH_ARG(bool, smaller_is_better) = true;
  // Validations in a row without improvement that stop training; 0: the first such validation.
  TORCH_ARG(int64_t, patience) = 0;
  // How far a value must beat the best so far to count as an improvement; not negative.
  TORCH_ARG(double, min_delta) = 0.0;
};

// Stops training when a validation metric stops improving: after options.patience() validations
// in a row in which the metric did not beat its best so far by more than options.min_delta() (a
// NaN never does, and is never the best; the first number is the first best), it
// calls ctx.set_stop_requested() with the reason, and training ends with a final validation and
// checkpoint. Its best value and count of validations without improvement are saved in
// checkpoints, so a resumed run keeps its patience. The experiment file's `early_stopping` key
// adds one named "early_stopping"; a trial may build its own in build_callbacks.
class EarlyStopping : public Callback {
 public:
  // Throws Error when the metric's name is empty, or patience or min_delta is negative.
  EarlyStopping(TrialContext& ctx, EarlyStoppingOptions options);

  // Throws TrainingError naming the metric and the metrics present when it is missing.
  void on_validation_end(const MetricValues& metrics) override;
  void save_state(torch::serialize::OutputArchive& archive) override;
  void load_state(torch::serialize::InputArchive& archive) override;

  std::optional<double> best() const { return best_; }
  int64_t validations_without_improvement() const { return bad_validations_; }

 private:
  TrialContext& ctx_;
  EarlyStoppingOptions options_;
  std::optional<double> best_;
  int64_t bad_validations_ = 0;
};

}  // namespace crucible
