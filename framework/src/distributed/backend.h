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

// What use_nccl needs to know of the machine.
struct Machine {
  bool nccl_built = false;  // the LibTorch has ProcessGroupNCCL
  int64_t gpus = 0;         // CUDA devices this process sees
};
Machine this_machine();

// Whether a rank computing on `device`, one of `local_size` ranks on its node, all-reduces its
// CUDA tensors over NCCL (true) or over Gloo (false) under `backend`. auto takes NCCL for a CUDA
// device when the build has it and every rank of the node has a GPU of its own (NCCL refuses
// two ranks on one GPU), else Gloo; gloo never takes NCCL; nccl always does. CPU tensors
// (metrics, objects, votes) always go over Gloo. Throws UsageError naming
// resources.distributed_backend, the cause and the fix when nccl is asked for and the build has
// no NCCL, `device` is not a CUDA device, or ranks would share a GPU.
bool use_nccl(DistributedBackend backend, const torch::Device& device, int64_t local_size,
              const Machine& machine = this_machine());

}  // namespace crucible::dist
