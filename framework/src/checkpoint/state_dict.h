#pragma once

#include <string>
#include <vector>

#include <torch/torch.h>

#include "checkpoint/tensor_files.h"

namespace crucible::checkpoint {

// A module's parameters and buffers by dotted name, sorted by name: its state dict as PyTorch
// names it. Written with torch_dict_bytes (Python: torch.load, weights_only safe) and
// write_safetensors.
NamedTensors state_dict(const torch::nn::Module& module);

// Copies a state dict (a file torch_dict_bytes wrote, or torch.save of a dict of tensors) into
// `module`. Throws TrainingError listing every missing name, unexpected name and shape mismatch,
// with `source` naming the file.
void load_state_dict(torch::nn::Module& module, const std::vector<char>& bytes,
                     const std::string& source);

}  // namespace crucible::checkpoint
