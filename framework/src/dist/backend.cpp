#include "dist/backend.h"

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

bool use_nccl(DistributedBackend backend, const torch::Device& device) {
  switch (backend) {
    case DistributedBackend::kGloo:
      return false;
    case DistributedBackend::kAuto:
      return nccl_built() && device.is_cuda();
    case DistributedBackend::kNccl:
      if (!nccl_built()) {
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
      return true;
  }
  TORCH_INTERNAL_ASSERT(false, "unknown DistributedBackend");
  return false;
}

}  // namespace crucible::dist
