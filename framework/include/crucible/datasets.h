#pragma once

// Readers for the file formats datasets come in, and a dataset of tensors Python saved. Each
// reader throws crucible::TrainingError naming the path when a file is missing or malformed.

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include <crucible/data.h>

namespace crucible {

// An IDX file (the MNIST format), gzip-compressed or not: unsigned bytes (type 0x08) in 1 to 4
// dimensions, as a uint8 tensor of the file's shape. The message for a missing file names the path
// and, when given, `missing_hint` (where to get it).
torch::Tensor read_idx(const std::string& path, const std::string& missing_hint = "");

// A split of MNIST or Fashion-MNIST in `dir`: the images of <split>-images-idx3-ubyte.gz (or
// without .gz) as uint8 [n, 28, 28] and the labels of <split>-labels-idx1-ubyte[.gz] as int64
// [n]. `split` is "train" or "t10k". Throws when the two counts differ.
std::pair<torch::Tensor, torch::Tensor> read_mnist(const std::string& dir, const std::string& split,
                                                   const std::string& missing_hint = "");

// The CIFAR-10 binary format: records of one label byte and 3072 image bytes (red, green, blue
// planes of 32 x 32, row-major). Reads `files` in order and returns the images as uint8
// [n, 3, 32, 32] and the labels as int64 [n]. Throws when a file's size is not a whole number of
// records.
std::pair<torch::Tensor, torch::Tensor> read_cifar10(const std::vector<std::string>& files);
// The training split (data_batch_1.bin .. data_batch_5.bin) or the test split (test_batch.bin)
// of the directory `dir` (cifar-10-batches-bin).
std::pair<torch::Tensor, torch::Tensor> read_cifar10(const std::string& dir, bool train);

// The named tensors of a file Python wrote: a dict of tensors saved by torch.save (its zip format),
// or a safetensors file (recognised by content, not by name; dtypes bool, uint8, int8/16/32/64,
// float16, bfloat16, float32/64). The tensors are on the CPU. LibTorch 1.13 cannot unpickle a
// torch.save'd dict of a single tensor: that is an error saying so (safetensors has no such limit).
std::map<std::string, torch::Tensor> read_tensor_file(const std::string& path);

// A dataset of the tensors `names` (example i: the i-th row of each, in the order of `names`),
// read with read_tensor_file from `path`: one file, or a directory whose files ending in .pt,
// .pth or .safetensors are read and merged (a name in two files is an error). Throws
// TrainingError naming a missing name and the names present, or tensors of unequal length.
std::shared_ptr<TensorDataset> load_tensor_dataset(const std::string& path,
                                                   const std::vector<std::string>& names);

}  // namespace crucible
