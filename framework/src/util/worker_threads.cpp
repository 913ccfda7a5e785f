#include "util/worker_threads.h"

#include <dlfcn.h>

#include <ATen/Parallel.h>

namespace crucible::util {

void use_intra_op_threads_here(int threads) {
  // LibTorch sets up each thread's OpenMP thread count on its first parallel call, to the
  // process-wide count; done first here so that it does not undo what follows.
  at::get_num_threads();
  // OpenMP's per-thread setting; the runtime is LibTorch's, so looked up rather than linked.
  static const auto set_threads =
      reinterpret_cast<void (*)(int)>(::dlsym(RTLD_DEFAULT, "omp_set_num_threads"));
  if (set_threads != nullptr) set_threads(threads);
}

}  // namespace crucible::util
