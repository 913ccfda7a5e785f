#include "distributed/backend.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <crucible/errors.h>

namespace crucible::dist {

bool nccl_built() {
#ifdef USE_C10D_NCCL
  return true;
#else
  return false;
#endif
}

torch::Device rank_device(int64_t local_rank) {
  if (!torch::cuda::is_available()) return torch::Device(torch::kCPU);
  const auto count = static_cast<int64_t>(torch::cuda::device_count());
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(local_rank % count));
}

Machine this_machine() { return {nccl_built(), static_cast<int64_t>(torch::cuda::device_count())}; }

bool use_nccl(DistributedBackend backend, const torch::Device& device, int64_t local_size,
              const Machine& machine) {
  const bool shared = local_size > machine.gpus;
  switch (backend) {
    case DistributedBackend::kGloo:
      return false;
    case DistributedBackend::kAuto:
      return machine.nccl_built && device.is_cuda() && !shared;
    case DistributedBackend::kNccl:
      if (!machine.nccl_built) {
        throw UsageError(
            "resources.distributed_backend is nccl, but this LibTorch was built without NCCL "
            "(its c10d has Gloo only); use gloo or auto");
      }
      if (!device.is_cuda()) {
        throw UsageError(fmt::format(
            "resources.distributed_backend is nccl, but this process computes on {} (CUDA is "
            "not available); NCCL reduces CUDA tensors only: use gloo or auto",
            device.str()));
      }
      if (shared) {
        throw UsageError(fmt::format(
            "resources.distributed_backend is nccl, but {} ranks on this node would share its {} "
            "GPU(s), and NCCL needs a GPU of its own for each rank: run at most {} slot(s) per "
            "node, or set distributed_backend to auto (Gloo when ranks share a GPU) or gloo",
            local_size, machine.gpus, machine.gpus));
      }
      return true;
  }
  TORCH_INTERNAL_ASSERT(false, "unknown DistributedBackend");
  return false;
}

bool nccl_for_run(DistributedBackend backend, const std::vector<std::string>& gpus) {
  TORCH_INTERNAL_ASSERT(!gpus.empty(), "nccl_for_run needs the GPU of at least one rank");
  if (backend == DistributedBackend::kGloo) return false;
  std::vector<size_t> without;
  std::map<std::string, std::vector<size_t>> ranks_of;
  for (size_t rank = 0; rank < gpus.size(); ++rank) {
    if (gpus[rank].empty()) {
      without.push_back(rank);
    } else {
      ranks_of[gpus[rank]].push_back(rank);
    }
  }
  const auto shared = std::find_if(ranks_of.begin(), ranks_of.end(),
                                   [](const auto& gpu) { return gpu.second.size() > 1; });
  if (without.empty() && shared == ranks_of.end()) return true;
  if (backend == DistributedBackend::kAuto) return false;
  if (!without.empty()) {
    throw UsageError(fmt::format(
        "resources.distributed_backend is nccl, but {} {} {} no GPU with NCCL (CPU only, or a "
        "LibTorch without NCCL); NCCL needs every rank on a GPU: give each rank one, or set "
        "distributed_backend to auto or gloo",
        without.size() == 1 ? "rank" : "ranks", fmt::join(without, ", "),
        without.size() == 1 ? "has" : "have"));
  }
  throw UsageError(fmt::format(
      "resources.distributed_backend is nccl, but ranks {} share the GPU {}, and NCCL needs a "
      "GPU of its own for each rank: give each rank its own (fewer ranks per node, or "
      "CUDA_VISIBLE_DEVICES), or set distributed_backend to auto (Gloo when ranks share a GPU) "
      "or gloo",
      fmt::join(shared->second, ", "), shared->first));
}

}  // namespace crucible::dist
