#pragma once

#include <cstdint>
#include <vector>

#include <torch/torch.h>

#include <crucible/distributed.h>

namespace crucible::train {

// Replaces the gradient of every parameter in `params` by its mean over the ranks of `dist`:
// gradients are flattened into buckets of at most `bucket_bytes` (per dtype, in parameter order;
// a larger tensor is a bucket of its own), each bucket all-reduced once. A parameter without a
// gradient takes part as zeros and then has one. Every rank must pass the same parameters, in
// the same order, with the same shapes. Nothing happens on one rank.
void average_gradients(const DistributedContext& dist, const std::vector<torch::Tensor>& params,
                       int64_t bucket_bytes);

// Copies rank 0's parameters and buffers of `module` to every rank.
void broadcast_module(const DistributedContext& dist, torch::nn::Module& module);

}  // namespace crucible::train
