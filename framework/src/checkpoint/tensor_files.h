#pragma once

// Files of named tensors that Python loads without Crucible and without unpickling code.

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

namespace crucible::checkpoint {

// Named tensors in a fixed order. Every tensor is written as its CPU, contiguous copy.
using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

// Receives the bytes of a file being written, in order.
using ByteSink = std::function<void(const void* data, size_t size)>;

// The bytes of `tensors` as a plain dict of name -> tensor in torch.save's zip format. The pickle
// names only torch._utils._rebuild_tensor_v2, collections.OrderedDict and torch.<Type>Storage, so
// `torch.load(path)` with weights_only=True (torch >= 2.6's default, and 1.13's option) opens it;
// torch::pickle_load reads it back in C++. Supports bool, uint8, int8/16/32/64, float16, bfloat16,
// float32/64 and complex64/128; any other dtype throws TrainingError naming the tensor. Built in
// memory: LibTorch's zip writer cannot survive an output that fails (a full disk) mid-file.
std::vector<char> torch_dict_bytes(const NamedTensors& tensors);

// Writes `tensors` in the safetensors format (an 8-byte little-endian header length, a JSON header
// of dtype, shape and data offsets per name with `metadata` as "__metadata__", then the raw
// little-endian data, contiguous and in the given order). Names must be unique. Supports the
// dtypes of torch_dict_bytes except complex; any other dtype throws TrainingError naming the
// tensor. What `sink` throws propagates.
void write_safetensors(const NamedTensors& tensors,
                       const std::vector<std::pair<std::string, std::string>>& metadata,
                       const ByteSink& sink);

// Whether `bytes` begin as a safetensors file does: a header length that fits, then a JSON object.
bool looks_like_safetensors(const std::string& bytes);

// The tensors of a safetensors file's `bytes`, in data order, on the CPU; the dtypes
// write_safetensors writes. Throws TrainingError naming `source` when the header or a tensor's
// extent is malformed or a dtype unknown.
NamedTensors read_safetensors(const std::string& bytes, const std::string& source);

// The tensors of a torch.save'd dict of name -> tensor (the zip format), in the dict's order.
// Throws TrainingError naming `source` when the bytes are not that, when a tensor's view reaches
// outside its storage (check_extent), or, on a LibTorch whose unpickler lacks the SETITEM opcode
// (1.13), when the dict has a single entry.
NamedTensors read_torch_dict(const std::string& bytes, const std::string& source);

// Requires the unpickled tensor `t` (named `name` in `source`) to stay inside its storage: sizes,
// strides and offset not negative, and the last element it reaches within the storage. LibTorch's
// unpickler applies a pickle's sizes, strides and offset unchecked, so a damaged or crafted file
// would read past the storage's memory. Throws TrainingError naming the file and the tensor.
void check_extent(const torch::Tensor& t, const std::string& source, const std::string& name);

}  // namespace crucible::checkpoint
