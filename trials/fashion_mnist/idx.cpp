#include "idx.h"

#include <crucible/datasets.h>

namespace fashion_mnist {

std::pair<torch::Tensor, torch::Tensor> load_split(const std::string& dir,
                                                   const std::string& split) {
  auto [images, labels] = crucible::read_mnist(
      dir, split,
      "Install the Debian package dataset-fashion-mnist (apt-get install dataset-fashion-mnist, "
      "which puts it in /usr/share/datasets/fashion-mnist) or point data.path at a directory "
      "holding it");
  constexpr double kMean = 0.2860, kStd = 0.3530;  // of the training images, in [0, 1]
  auto x = ((images.to(torch::kFloat) / 255.0 - kMean) / kStd).unsqueeze(1).contiguous();
  return {x, labels};
}

}  // namespace fashion_mnist
