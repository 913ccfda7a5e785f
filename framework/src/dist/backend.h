#pragma once

// Which device a rank computes on, and which c10d process group carries its CUDA tensors.

#include <cstdint>

#include <torch/torch.h>

#include <crucible/config.h>

namespace crucible::dist {

// Whether this LibTorch was built with ProcessGroupNCCL.
bool nccl_built();

// The device of the rank with `local_rank` on its node: cuda:<local_rank % device count> when
// CUDA is available (one process per GPU), else the CPU.
torch::Device rank_device(int64_t local_rank);

// Whether a rank computing on `device` all-reduces its CUDA tensors over NCCL (true) or over Gloo
// (false) under `backend`: auto takes NCCL for a CUDA device when the build has it; gloo never
// does; nccl always does. CPU tensors (metrics, objects, votes) always go over Gloo. Throws
// UsageError naming resources.distributed_backend when nccl is asked for and the build has no
// NCCL or `device` is not a CUDA device.
bool use_nccl(DistributedBackend backend, const torch::Device& device);

}  // namespace crucible::dist
