#pragma once

// Autocast state of the calling thread: the only place that knows LibTorch's autocast API, which
// changed between 1.x and 2.x.

#include <torch/torch.h>

namespace crucible::train {

struct AutocastState {
  bool enabled = false;
  at::ScalarType dtype = at::kFloat;
};

// The calling thread's autocast state for `device` (CPU or CUDA).
AutocastState autocast_state(torch::DeviceType device);
// Sets it.
void set_autocast_state(torch::DeviceType device, const AutocastState& state);
// Enters or leaves one level of autocast nesting; leaving the last clears the cast cache.
void enter_autocast();
void leave_autocast();
// Drops the cast copies of weights autocast keeps while enabled (after an optimizer step).
void clear_autocast_cache();

}  // namespace crucible::train
