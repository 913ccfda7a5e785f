#include "distributed/gpu_name.h"

#include <array>
#include <cstdlib>
#include <fstream>

#include <dlfcn.h>
#include <unistd.h>

namespace crucible::dist {
namespace {

// This host as NCCL tells hosts apart: $NCCL_HOSTID when set, else the host name and the
// kernel's boot id (which differs between machines that share a host name).
std::string host_name() {
  if (const char* id = std::getenv("NCCL_HOSTID"); id != nullptr && *id != '\0') return id;
  std::array<char, 256> name{};
  std::string host = gethostname(name.data(), name.size() - 1) == 0 ? name.data() : "";
  std::ifstream boot("/proc/sys/kernel/random/boot_id");
  std::string boot_id;
  if (std::getline(boot, boot_id) && !boot_id.empty()) host += ":" + boot_id;
  return host;
}

// The PCI address of the CUDA driver's device `index`, or "" when the driver cannot be loaded or
// does not answer. The driver numbers devices as the runtime does (both honour
// CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER). Its C entry points are looked up by name, so that
// Crucible needs no CUDA headers or link to the driver library.
std::string pci_address(int index) {
  // LibTorch has loaded the driver already when it found a GPU; this takes another reference,
  // kept: a driver initialised here must not be unloaded.
  void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (driver == nullptr) return "";
  using Init = int (*)(unsigned int);
  using DeviceGet = int (*)(int*, int);
  using PciBusId = int (*)(char*, int, int);
  const auto init = reinterpret_cast<Init>(dlsym(driver, "cuInit"));
  const auto device_get = reinterpret_cast<DeviceGet>(dlsym(driver, "cuDeviceGet"));
  const auto pci_bus_id = reinterpret_cast<PciBusId>(dlsym(driver, "cuDeviceGetPCIBusId"));
  std::array<char, 64> address{};
  int device = 0;
  const bool answered =
      init != nullptr && device_get != nullptr && pci_bus_id != nullptr && init(0) == 0 &&
      device_get(&device, index) == 0 &&
      pci_bus_id(address.data(), static_cast<int>(address.size() - 1), device) == 0;
  return answered ? std::string(address.data()) : "";
}

}  // namespace

std::string visible_gpu(const char* visible, int64_t index) {
  if (visible == nullptr) return std::to_string(index);
  const std::string list(visible);
  size_t start = 0;
  for (int64_t i = 0; start <= list.size(); ++i) {
    size_t end = list.find(',', start);
    if (end == std::string::npos) end = list.size();
    if (i == index) {
      const std::string entry = list.substr(start, end - start);
      const size_t first = entry.find_first_not_of(" \t");
      if (first == std::string::npos) break;
      return entry.substr(first, entry.find_last_not_of(" \t") - first + 1);
    }
    start = end + 1;
  }
  return std::to_string(index);
}

std::string gpu_name(const torch::Device& device) {
  if (!device.is_cuda()) return "";
  const int index = device.has_index() ? device.index() : 0;
  std::string address = pci_address(index);
  if (address.empty()) address = visible_gpu(std::getenv("CUDA_VISIBLE_DEVICES"), index);
  return host_name() + "/" + address;
}

}  // namespace crucible::dist
