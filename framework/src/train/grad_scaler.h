#pragma once

// Dynamic loss scaling for float16 training.

#include <cstdint>

#include <torch/torch.h>

namespace crucible::train {

struct GradScalerOptions {
  TORCH_ARG(double, init_scale) = 65536.0;
  TORCH_ARG(double, growth_factor) = 2.0;
  TORCH_ARG(double, backoff_factor) = 0.5;
  // Steps without inf/NaN gradients after which the scale grows.
  TORCH_ARG(int64_t, growth_interval) = 2000;
};

// PyTorch's GradScaler semantics: the loss is multiplied by the scale before backward; before an
// optimizer steps its gradients are divided by it and checked for inf/NaN, and a step whose
// gradients hold one is skipped; after each batch on which gradients were unscaled, the scale
// backs off (any inf/NaN) or, after growth_interval clean batches in a row, grows.
// Built on LibTorch's _amp_foreach_non_finite_check_and_unscale_ and _amp_update_scale_ where
// LibTorch has them for the device; elsewhere (LibTorch 1.x on CPU) the same arithmetic in plain
// tensor operations, with bitwise the same results.
class GradScaler {
 public:
  GradScaler(torch::Device device, GradScalerOptions options = {});

  // loss * scale.
  torch::Tensor scale(const torch::Tensor& loss) const;
  // Divides the defined gradients of `params` by the scale in place. Returns whether any of them
  // holds inf or NaN (one host sync), which is also recorded for update(). Throws TrainingError,
  // changing nothing, when one is float16 (PyTorch's GradScaler refuses them too).
  // Sparse gradients must be coalesced (coalesce_sparse_gradients).
  bool unscale(const std::vector<torch::Tensor>& params);
  // Whether unscale() ran since the last update().
  bool pending() const { return pending_; }
  // Backs off or grows the scale from what unscale() found since the last update().
  void update();

  double current_scale() const { return scale_.item<double>(); }
  int64_t growth_tracker() const { return growth_tracker_.item<int64_t>(); }

  // The scale and growth tracker, for checkpoints; and back.
  void save(torch::serialize::OutputArchive& archive) const;
  void load(torch::serialize::InputArchive& archive);

  // Whether LibTorch has the scaler kernels for `device` (false: the tensor-op equivalent runs).
  static bool has_native_kernels(torch::Device device);
  // Uses the tensor-op equivalent even where kernels exist (tests compare the two).
  void force_fallback(bool on) { native_ = !on; }

 private:
  GradScalerOptions options_;
  bool native_;
  torch::Tensor scale_;           // float32, one element, on the device
  torch::Tensor growth_tracker_;  // int32, one element
  torch::Tensor found_inf_;       // float32, one element: inf/NaN seen since the last update
  bool pending_ = false;
};

}  // namespace crucible::train
