// Which backend carries a rank's CUDA tensors, for machines this one need not be.
#include "catch.h"

#include <crucible/errors.h>

#include "distributed/backend.h"
#include "distributed/gpu_name.h"

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

TEST_CASE("the ranks of a run take NCCL only when each names a GPU no other rank does", "[dist]") {
  using crucible::dist::nccl_for_run;
  CHECK(nccl_for_run(DistributedBackend::kAuto, {"a/0000:3B:00.0", "a/0000:5E:00.0"}));
  // The same bus address on two hosts is two GPUs; one GPU seen as device 0 by both is one.
  CHECK(nccl_for_run(DistributedBackend::kAuto, {"a/0000:3B:00.0", "b/0000:3B:00.0"}));
  CHECK_FALSE(nccl_for_run(DistributedBackend::kAuto, {"a/0000:3B:00.0", "a/0000:3B:00.0"}));
  CHECK_FALSE(nccl_for_run(DistributedBackend::kAuto, {"a/1", ""}));
  CHECK_FALSE(nccl_for_run(DistributedBackend::kGloo, {"a/1", "a/2"}));
  CHECK(nccl_for_run(DistributedBackend::kNccl, {"a/1", "a/2", "b/1"}));
}

TEST_CASE("an explicit nccl for ranks that share a GPU or have none names them", "[dist]") {
  const auto refusal = [](const std::vector<std::string>& gpus) {
    try {
      crucible::dist::nccl_for_run(DistributedBackend::kNccl, gpus);
    } catch (const crucible::UsageError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK_THAT(
      refusal({"a/1", "b/1", "a/1", "a/2"}),
      Catch::Contains("ranks 0, 2 share the GPU a/1") && Catch::Contains("give each rank its own"));
  CHECK_THAT(refusal({"a/1", "", "a/2", ""}), Catch::Contains("ranks 1, 3 have no GPU with NCCL"));
  CHECK_THAT(refusal({""}), Catch::Contains("rank 0 has no GPU with NCCL"));
}

TEST_CASE("a GPU's fallback name is its entry of CUDA_VISIBLE_DEVICES", "[dist]") {
  using crucible::dist::visible_gpu;
  CHECK(visible_gpu(nullptr, 1) == "1");
  CHECK(visible_gpu("3", 0) == "3");
  CHECK(visible_gpu("2, 5 ,GPU-8f2c", 1) == "5");
  CHECK(visible_gpu("2, 5 ,GPU-8f2c", 2) == "GPU-8f2c");
  CHECK(visible_gpu("2,5", 2) == "2");  // past the list: the index
  CHECK(visible_gpu("2,,5", 1) == "1");
  CHECK(crucible::dist::gpu_name(torch::kCPU).empty());
}
