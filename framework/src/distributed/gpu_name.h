#pragma once

// Names for GPUs that tell the ranks of a run whether two of them compute on the same one, however
// each rank's CUDA_VISIBLE_DEVICES numbers its devices.

#include <cstdint>
#include <string>

#include <torch/torch.h>

namespace crucible::dist {

// The GPU `device` is, as "<host>/<PCI domain:bus:device.function>" from the CUDA driver, the
// same in every process of the host whichever index the device has there; <host> is the host as
// NCCL tells hosts apart ($NCCL_HOSTID, else the host name and the kernel's boot id). When the
// driver does not answer, "<host>/" followed by visible_gpu's name. "" when `device` is not a
// CUDA device.
std::string gpu_name(const torch::Device& device);

// The name of CUDA device `index` of a process whose CUDA_VISIBLE_DEVICES is `visible` (nullptr:
// unset): the list's entry at `index` with its blanks trimmed ("3", "GPU-<uuid>"), or `index`
// itself when the list is unset or shorter. Two processes given different entries for one GPU
// ("0" and its UUID) get different names.
std::string visible_gpu(const char* visible, int64_t index);

}  // namespace crucible::dist
