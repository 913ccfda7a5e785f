#pragma once

// The BLAS that LibTorch's CPU matrix products run on, and whether its threads compete with
// LibTorch's own.

#include <string>

namespace crucible::util {

// How a BLAS runs a call on several cores.
enum class BlasThreading {
  kUnknown,     // not an OpenBLAS, or one that does not say
  kSequential,  // one thread, the caller's
  kPthreads,    // a pool of its own, beside LibTorch's OpenMP threads
  kOpenMP,      // OpenMP's threads, shared with LibTorch (a call from inside a parallel region
                // runs on the calling thread alone)
};

// The BLAS as this process loaded it.
struct BlasInfo {
  std::string name;  // "OpenBLAS 0.3.21"; "" when the process has no OpenBLAS
  BlasThreading threading = BlasThreading::kUnknown;
  int threads = 0;  // the BLAS's thread count; 0 when unknown
};

// Asks the OpenBLAS loaded in this process, if any, through its exported functions
// (openblas_get_config, openblas_get_parallel, openblas_get_num_threads). Another BLAS (MKL,
// the reference BLAS) gives an empty name and kUnknown.
BlasInfo loaded_blas();

// "OpenBLAS 0.3.21, pthreads build, 2 threads"; "unknown" for an empty name.
std::string describe(const BlasInfo& blas);

// A warning naming the cause and the fixes when `blas` runs a thread pool of its own (kPthreads)
// with more than one thread while LibTorch runs `intra_op_threads` > 1 OpenMP threads: the two
// pools then take turns on the same cores, and an operator that calls the BLAS from inside a
// parallel region (LibTorch 2.x's im2col convolution does) asks that pool for its threads from
// every thread of the region. "" otherwise.
std::string blas_oversubscription_warning(const BlasInfo& blas, int intra_op_threads);

}  // namespace crucible::util
