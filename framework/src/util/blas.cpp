#include "util/blas.h"

#include <dlfcn.h>

#include <sstream>

#include <fmt/format.h>

namespace crucible::util {
namespace {

template <typename F>
F lookup(const char* symbol) {
  return reinterpret_cast<F>(::dlsym(RTLD_DEFAULT, symbol));
}

}  // namespace

BlasInfo loaded_blas() {
  BlasInfo info;
  const auto config = lookup<char* (*)()>("openblas_get_config");
  if (config == nullptr) return info;
  // "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY Haswell MAX_THREADS=64": the first two words.
  const char* text = config();
  std::istringstream words(text ? text : "");
  std::string library, version;
  words >> library >> version;
  info.name = library.empty() ? "OpenBLAS" : version.empty() ? library : library + " " + version;
  if (const auto parallel = lookup<int (*)()>("openblas_get_parallel")) {
    switch (parallel()) {
      case 0:
        info.threading = BlasThreading::kSequential;
        break;
      case 1:
        info.threading = BlasThreading::kPthreads;
        break;
      case 2:
        info.threading = BlasThreading::kOpenMP;
        break;
      default:
        break;
    }
  }
  if (const auto threads = lookup<int (*)()>("openblas_get_num_threads")) info.threads = threads();
  return info;
}

std::string describe(const BlasInfo& blas) {
  if (blas.name.empty()) return "unknown";
  std::string text = blas.name;
  switch (blas.threading) {
    case BlasThreading::kSequential:
      text += ", sequential build";
      break;
    case BlasThreading::kPthreads:
      text += ", pthreads build";
      break;
    case BlasThreading::kOpenMP:
      text += ", OpenMP build";
      break;
    case BlasThreading::kUnknown:
      break;
  }
  if (blas.threads > 0)
    text += fmt::format(", {} thread{}", blas.threads, blas.threads == 1 ? "" : "s");
  return text;
}

std::string blas_oversubscription_warning(const BlasInfo& blas, int intra_op_threads) {
  if (blas.threading != BlasThreading::kPthreads || blas.threads <= 1 || intra_op_threads <= 1) {
    return "";
  }
  return fmt::format(
      "{} runs {} threads of its own beside LibTorch's {} OpenMP threads: they compete for the "
      "cores, and CPU training can run many times slower. Use OpenBLAS's OpenMP build (Debian: "
      "install libopenblas0-openmp and select it with update-alternatives for libopenblas.so.0, "
      "libblas.so.3 and liblapack.so.3; tools/setup.sh does), or set OPENBLAS_NUM_THREADS=1 or "
      "OMP_NUM_THREADS=1",
      describe(blas), blas.threads, intra_op_threads);
}

}  // namespace crucible::util
