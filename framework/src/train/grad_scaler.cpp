#include "train/grad_scaler.h"

#include <cmath>

#include <ATen/core/dispatch/Dispatcher.h>
#include <fmt/format.h>

#include <crucible/errors.h>

#include "train/gradient_values.h"

namespace crucible::train {
namespace {

bool has_kernel(const char* op, torch::Device device) {
  const auto handle = c10::Dispatcher::singleton().findOp({op, ""});
  const auto key = device.is_cuda() ? c10::DispatchKey::CUDA : c10::DispatchKey::CPU;
  return handle && handle->hasKernelForDispatchKey(key);
}

}  // namespace

GradScaler::GradScaler(torch::Device device, GradScalerOptions options)
    : options_(options),
      native_(has_native_kernels(device)),
      scale_(torch::full({1}, options.init_scale(), torch::dtype(torch::kFloat).device(device))),
      growth_tracker_(torch::zeros({1}, torch::dtype(torch::kInt).device(device))),
      found_inf_(torch::zeros({1}, torch::dtype(torch::kFloat).device(device))) {}

bool GradScaler::has_native_kernels(torch::Device device) {
  return has_kernel("aten::_amp_foreach_non_finite_check_and_unscale_", device) &&
         has_kernel("aten::_amp_update_scale_", device);
}

torch::Tensor GradScaler::scale(const torch::Tensor& loss) const {
  return loss * scale_.to(loss.device());
}

bool GradScaler::unscale(const std::vector<torch::Tensor>& params) {
  for (const torch::Tensor& p : params) {
    if (p.grad().defined() && p.grad().scalar_type() == torch::kHalf) {
      throw TrainingError(fmt::format(
          "optimizations.mixed_precision: fp16 trains float32 parameters under float16 autocast, "
          "but a parameter of shape {} has a float16 gradient (a model converted to "
          "torch::kHalf?), which the gradient scaler cannot unscale without losing it to "
          "rounding: keep the model in float32, or set mixed_precision: none to train float16 "
          "parameters without a scaler",
          c10::str(p.sizes())));
    }
  }
  std::vector<torch::Tensor> grads = gradient_values(params);
  torch::Tensor found = torch::zeros_like(found_inf_);
  const torch::Tensor inv_scale = scale_.to(torch::kDouble).reciprocal().to(torch::kFloat);
  if (native_) {
    at::_amp_foreach_non_finite_check_and_unscale_(grads, found, inv_scale);
  } else {
    for (auto& g : grads) {
      found = torch::maximum(found, torch::isfinite(g).all().logical_not().to(torch::kFloat));
      g.mul_(inv_scale);
    }
  }
  found_inf_.add_(found);
  pending_ = true;
  return found.item<float>() != 0.0f;
}

void GradScaler::update() {
  if (native_) {
    at::_amp_update_scale_(scale_, growth_tracker_, found_inf_, options_.growth_factor(),
                           options_.backoff_factor(), options_.growth_interval());
  } else {
    // The arithmetic of LibTorch's kernel, on the host (this runs only on CPU tensors).
    const auto scale = scale_.item<float>();
    if (found_inf_.item<float>() != 0.0f) {
      scale_.fill_(static_cast<float>(scale * options_.backoff_factor()));
      growth_tracker_.zero_();
    } else {
      const int64_t successful = growth_tracker_.item<int>() + 1;
      if (successful == options_.growth_interval()) {
        const auto grown = static_cast<float>(scale * options_.growth_factor());
        if (std::isfinite(grown)) scale_.fill_(grown);
        growth_tracker_.zero_();
      } else {
        growth_tracker_.fill_(successful);
      }
    }
  }
  found_inf_.zero_();
  pending_ = false;
}

void GradScaler::save(torch::serialize::OutputArchive& archive) const {
  archive.write("scale", scale_.cpu());
  archive.write("growth_tracker", growth_tracker_.cpu());
}

void GradScaler::load(torch::serialize::InputArchive& archive) {
  torch::Tensor scale, tracker;
  archive.read("scale", scale);
  archive.read("growth_tracker", tracker);
  scale_.copy_(scale);
  growth_tracker_.copy_(tracker);
}

}  // namespace crucible::train
