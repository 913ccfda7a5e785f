#include "train/autocast.h"

#include <ATen/autocast_mode.h>
#include <torch/version.h>

// LibTorch 2.4 replaced the per-device functions (set_cpu_enabled, set_autocast_gpu_dtype, ...)
// with functions taking the device type, and deprecated the old ones.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
#define CRUCIBLE_AUTOCAST_BY_DEVICE_TYPE 1
#endif

namespace crucible::train {

AutocastState autocast_state(torch::DeviceType device) {
#ifdef CRUCIBLE_AUTOCAST_BY_DEVICE_TYPE
  return {at::autocast::is_autocast_enabled(device), at::autocast::get_autocast_dtype(device)};
#else
  if (device == torch::kCUDA) {
    return {at::autocast::is_enabled(), at::autocast::get_autocast_gpu_dtype()};
  }
  return {at::autocast::is_cpu_enabled(), at::autocast::get_autocast_cpu_dtype()};
#endif
}

void set_autocast_state(torch::DeviceType device, const AutocastState& state) {
#ifdef CRUCIBLE_AUTOCAST_BY_DEVICE_TYPE
  at::autocast::set_autocast_enabled(device, state.enabled);
  at::autocast::set_autocast_dtype(device, state.dtype);
#else
  if (device == torch::kCUDA) {
    at::autocast::set_enabled(state.enabled);
    at::autocast::set_autocast_gpu_dtype(state.dtype);
  } else {
    at::autocast::set_cpu_enabled(state.enabled);
    at::autocast::set_autocast_cpu_dtype(state.dtype);
  }
#endif
}

void enter_autocast() { at::autocast::increment_nesting(); }

void leave_autocast() {
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
}

void clear_autocast_cache() { at::autocast::clear_cache(); }

}  // namespace crucible::train
