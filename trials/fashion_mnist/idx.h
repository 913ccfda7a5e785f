#pragma once

#include <string>
#include <utility>

#include <torch/torch.h>

namespace fashion_mnist {

// Images of a split ("train" or "t10k") of the Fashion-MNIST files in `dir` (crucible::read_mnist)
// as float [n, 1, 28, 28], normalised with the training set's mean and standard deviation, and
// labels as int64 [n]. A missing file's error names the Debian package that provides it.
std::pair<torch::Tensor, torch::Tensor> load_split(const std::string& dir,
                                                   const std::string& split);

}  // namespace fashion_mnist
