#pragma once

namespace crucible::util {

// Makes the LibTorch operations the calling thread runs from now on use `threads` intra-op
// threads (> 0), whatever the process's count (at::set_num_threads). Under LibTorch's OpenMP
// build every thread that starts a parallel region gets a team of its own, as large as that
// count, so a data-loader worker assembling a batch (index_select, stack) would otherwise bring
// a second team to compete with the training step's for the same cores. Affects the calling
// thread only; does nothing under a LibTorch without OpenMP, whose intra-op pool all threads
// share.
void use_intra_op_threads_here(int threads);

}  // namespace crucible::util
