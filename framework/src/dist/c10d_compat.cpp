#include "dist/c10d_compat.h"

#ifdef USE_C10D_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

namespace crucible::dist {

void shut_down_nccl(Group& group) noexcept {
#if defined(USE_C10D_NCCL) && \
    (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4))
  try {
    static_cast<c10d::ProcessGroupNCCL&>(group).shutdown();
  } catch (...) {
    // A group whose peers are gone may fail to shut down; the process is ending anyway.
  }
#else
  (void)group;
#endif
}

}  // namespace crucible::dist
