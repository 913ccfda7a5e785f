#include "distributed/backend.h"

#include <fmt/format.h>

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

}  // namespace crucible::dist
