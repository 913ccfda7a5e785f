#pragma once

#include <string>
#include <vector>

#include <torch/torch.h>

namespace crucible::checkpoint {

// A module's parameters and buffers by dotted name, as torch.save would write a state dict.
// Serialised with torch::pickle_save, so Python reads it with a plain `torch.load(path)`.
std::vector<char> save_state_dict(const torch::nn::Module& module);

// Copies a state dict (as written by save_state_dict) into `module`. Throws TrainingError listing
// every missing name, unexpected name and shape mismatch, with `source` naming the file.
void load_state_dict(torch::nn::Module& module, const std::vector<char>& bytes,
                     const std::string& source);

}  // namespace crucible::checkpoint
