#pragma once

// Which device a rank computes on, and which c10d process group carries its CUDA tensors.

#include <cstdint>
#include <string>
#include <vector>

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

// Whether ranks that see this process's GPUs, `local_size` of them on each node and one
// computing on `device`, would all-reduce their CUDA tensors over NCCL (true) or over Gloo (false)
// under `backend`: the check a launcher makes before it starts them. auto takes NCCL for a CUDA
// device when the build has it and every rank of the node has a GPU of its own (NCCL refuses two
// ranks on one GPU), else Gloo; gloo never takes NCCL; nccl always does. CPU tensors (metrics,
// objects, votes) always go over Gloo. Throws UsageError naming resources.distributed_backend, the
// cause and the fix when nccl is asked for and the build has no NCCL, `device` is not a CUDA
// device, or ranks would share a GPU. The ranks themselves decide with nccl_for_run once they
// have met, as each may see other GPUs (its own CUDA_VISIBLE_DEVICES).
bool use_nccl(DistributedBackend backend, const torch::Device& device, int64_t local_size,
              const Machine& machine = this_machine());

// Whether the ranks of a run carry their CUDA tensors over NCCL under `backend`, rank i
// computing on the GPU gpus[i] names (gpu_name; "" for a rank without a GPU or without NCCL).
// auto: when every rank has a GPU and no two name the same one, else Gloo; gloo: never; nccl:
// always, and throws UsageError naming resources.distributed_backend, the ranks, the cause and
// the fix when a rank has no GPU or two share one. Requires gpus.size() >= 1. Ranks given the
// same `gpus` decide the same.
bool nccl_for_run(DistributedBackend backend, const std::vector<std::string>& gpus);

}  // namespace crucible::dist
