#pragma once

// The one seam between the c10d of LibTorch 1.x and 2.x: what differs between them is declared
// here; the parts of c10d that are the same in both (TCPStore, PrefixStore, the Gloo and NCCL
// classes' constructors and options) are used directly.
//
// In 1.x, ProcessGroupGloo and ProcessGroupNCCL are c10d::ProcessGroups. In 2.x they are
// c10d::Backends, which a c10d::ProcessGroup holds per device type. Crucible keeps one group per
// device type itself (Gloo for CPU tensors, NCCL for CUDA ones), so it holds the backend objects
// directly in both: `Group` is whichever type the concrete backends derive from. Both types offer
// the same collectives (allreduce, broadcast, allgather, barrier), getSize() and
// getBackendName().
//
// From 2.4 a TCPStore asks for the libuv server by default, and refuses to start (as server or
// client) where LibTorch was built without libuv, as Debian's is. open_tcp_store hides that.

#include <torch/version.h>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#endif

#include <string>

namespace crucible::dist {

#if TORCH_VERSION_MAJOR >= 2
using Group = c10d::Backend;
#else
using Group = c10d::ProcessGroup;
#endif

// The environment variable that makes a ProcessGroupNCCL abort a collective that timed out
// (renamed from NCCL_ASYNC_ERROR_HANDLING in 2.2; the old name is deprecated there).
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 2)
inline constexpr const char* kNcclErrorHandlingVariable = "TORCH_NCCL_ASYNC_ERROR_HANDLING";
#else
inline constexpr const char* kNcclErrorHandlingVariable = "NCCL_ASYNC_ERROR_HANDLING";
#endif

// Releases the communicator of an NCCL group before its destructor runs, so that the process
// exits without NCCL's warning about a group never shut down. Does nothing where the LibTorch
// has no such call (before 2.4) or no NCCL. `group` must be the NCCL group. Never throws.
void shut_down_nccl(Group& group) noexcept;

// Opens a TCPStore at host with options (serving it when options.isServer). Takes the libuv
// server where options ask for it and this LibTorch has it, the classic server otherwise; both
// speak the same protocol. Throws what the TCPStore constructor throws for any other failure
// (address in use, peer unreachable, timeout).
c10::intrusive_ptr<c10d::TCPStore> open_tcp_store(const std::string& host,
                                                  c10d::TCPStoreOptions options);

}  // namespace crucible::dist
