#pragma once

#include <string>

#include <torch/torch.h>

namespace fashion_mnist {

// Reads a gzip-compressed IDX file (the MNIST format): unsigned bytes with 1 to 4 dimensions.
// Returns a uint8 tensor of the file's shape. Throws crucible::TrainingError naming the path when
// the file is missing (and the Debian package that provides it) or malformed.
torch::Tensor read_idx_gz(const std::string& path);

// Images of a split ("train" or "t10k") as float [n, 1, 28, 28], normalised with the training
// set's mean and standard deviation, and labels as int64 [n].
std::pair<torch::Tensor, torch::Tensor> load_split(const std::string& dir,
                                                   const std::string& split);

}  // namespace fashion_mnist
