// Which backend carries a rank's CUDA tensors, for machines this one need not be.
#include "catch.h"

#include <crucible/errors.h>

#include "distributed/backend.h"

using crucible::DistributedBackend;
using crucible::dist::Machine;
using crucible::dist::use_nccl;

namespace {

const torch::Device kGpu0(torch::kCUDA, 0);
const torch::Device kCpu(torch::kCPU);

std::string refusal(DistributedBackend backend, const torch::Device& device, int64_t local_size,
                    const Machine& machine) {
  try {
    use_nccl(backend, device, local_size, machine);
  } catch (const crucible::UsageError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("auto takes NCCL only when every rank of the node has a GPU of its own", "[dist]") {
  const Machine one_gpu{true, 1}, two_gpus{true, 2}, no_nccl{false, 2};
  CHECK(use_nccl(DistributedBackend::kAuto, kGpu0, 1, one_gpu));
  CHECK(use_nccl(DistributedBackend::kAuto, kGpu0, 2, two_gpus));
  CHECK_FALSE(use_nccl(DistributedBackend::kAuto, kGpu0, 2, one_gpu));  // two ranks, one GPU
  CHECK_FALSE(use_nccl(DistributedBackend::kAuto, kGpu0, 2, no_nccl));
  CHECK_FALSE(use_nccl(DistributedBackend::kAuto, kCpu, 1, Machine{true, 0}));
  CHECK_FALSE(use_nccl(DistributedBackend::kGloo, kGpu0, 1, one_gpu));
}

TEST_CASE("an explicit nccl that cannot work is refused with the cause and the fix", "[dist]") {
  CHECK(use_nccl(DistributedBackend::kNccl, kGpu0, 2, Machine{true, 2}));
  CHECK_THAT(refusal(DistributedBackend::kNccl, kGpu0, 3, Machine{true, 2}),
             Catch::Contains("3 ranks on this node would share its 2 GPU(s)") &&
                 Catch::Contains("run at most 2 slot(s) per node"));
  CHECK_THAT(refusal(DistributedBackend::kNccl, kGpu0, 1, Machine{false, 1}),
             Catch::Contains("built without NCCL"));
  CHECK_THAT(refusal(DistributedBackend::kNccl, kCpu, 1, Machine{true, 0}),
             Catch::Contains("CUDA is not available"));
}
