// util/blas: what the loaded BLAS says of itself, and the warning when its threads compete with
// LibTorch's; end to end, trainer fit on each of Debian's OpenBLAS builds.
#include "catch.h"

#include <link.h>

#include <fmt/format.h>

#include "process.h"
#include "util/blas.h"
#include "util/cpus.h"
#include "util/file_system.h"

using crucible::util::blas_oversubscription_warning;
using crucible::util::BlasInfo;
using crucible::util::BlasThreading;
using crucible::util::describe;

namespace {

// The real path (links resolved: Debian's alternatives name the build's directory) of a loaded
// object whose file name holds "libopenblas", or "".
std::string loaded_openblas() {
  std::string found;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* out) {
        const std::string name = info->dlpi_name ? info->dlpi_name : "";
        if (name.find("libopenblas") != std::string::npos) *static_cast<std::string*>(out) = name;
        return 0;
      },
      &found);
  return found.empty() ? found : crucible::util::canonical_or_absolute(found);
}

}  // namespace

TEST_CASE("the BLAS warning is given for a pthreads pool beside OpenMP threads, and only then",
          "[util][blas]") {
  const BlasInfo pthreads{"OpenBLAS 0.3.29", BlasThreading::kPthreads, 2};
  const std::string warning = blas_oversubscription_warning(pthreads, 2);
  CHECK_THAT(warning, Catch::Contains("OpenBLAS 0.3.29, pthreads build, 2 threads"));
  CHECK_THAT(warning, Catch::Contains("LibTorch's 2 OpenMP threads"));
  CHECK_THAT(warning, Catch::Contains("libopenblas0-openmp"));
  CHECK_THAT(warning, Catch::Contains("OPENBLAS_NUM_THREADS=1"));

  CHECK(blas_oversubscription_warning(pthreads, 1).empty());
  CHECK(blas_oversubscription_warning({"OpenBLAS 0.3.29", BlasThreading::kPthreads, 1}, 8).empty());
  CHECK(blas_oversubscription_warning({"OpenBLAS 0.3.29", BlasThreading::kOpenMP, 2}, 2).empty());
  CHECK(
      blas_oversubscription_warning({"OpenBLAS 0.3.29", BlasThreading::kSequential, 1}, 2).empty());
  CHECK(blas_oversubscription_warning({}, 16).empty());

  CHECK(describe({}) == "unknown");
  CHECK(describe({"OpenBLAS 0.3.21", BlasThreading::kOpenMP, 1}) ==
        "OpenBLAS 0.3.21, OpenMP build, 1 thread");
  CHECK(describe({"OpenBLAS 0.3.21", BlasThreading::kUnknown, 0}) == "OpenBLAS 0.3.21");
}

TEST_CASE("loaded_blas names the OpenBLAS this process loaded, with its version and build",
          "[util][blas]") {
  const std::string path = loaded_openblas();
  const BlasInfo blas = crucible::util::loaded_blas();
  CAPTURE(path, describe(blas));
  if (path.empty()) {
    CHECK(blas.name.empty());
    CHECK(blas.threading == BlasThreading::kUnknown);
    return;
  }
  CHECK_THAT(blas.name, Catch::StartsWith("OpenBLAS 0."));
  CHECK(blas.threads >= 1);
  // Debian installs each build in a directory named after it.
  const bool pthreads = path.find("/openblas-pthread/") != std::string::npos;
  const bool openmp = path.find("/openblas-openmp/") != std::string::npos;
  if (pthreads) CHECK(blas.threading == BlasThreading::kPthreads);
  if (openmp) CHECK(blas.threading == BlasThreading::kOpenMP);
#ifdef CRUCIBLE_OPENBLAS_LIBDIR
  CHECK((pthreads || openmp));  // one of Debian's builds
#endif
}

#ifdef CRUCIBLE_OPENBLAS_LIBDIR
// Debian's two builds of OpenBLAS, each put first on the library path of a trainer fit.
TEST_CASE("trainer fit logs the BLAS it runs on and warns when its threads compete with LibTorch's",
          "[util][blas][e2e]") {
  using namespace crucible::testing;
  const std::string libdir = CRUCIBLE_OPENBLAS_LIBDIR;
  const auto fit = [&](const std::string& build, int omp_threads) {
    TempDir dir;
    const CommandResult r = run_command(fmt::format(
        "LD_LIBRARY_PATH={}/openblas-{} OMP_NUM_THREADS={} {} fit {}/linear.yaml --output {} "
        "--set max_length.batches=4",
        libdir, build, omp_threads, kTrainer, kConfigs, dir / "run"));
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    const std::string log = read_file(dir / "run/trainer.log");
    // The log holds what the console showed.
    CHECK_THAT(log, Catch::Contains(fmt::format("cpu: {} intra-op thread{}; BLAS OpenBLAS",
                                                omp_threads, omp_threads == 1 ? "" : "s")));
    return r.output;
  };
  // OpenBLAS takes no more threads than the process has CPUs.
  if (crucible::util::allowed_cpus().size() < 2) {
    WARN("one CPU: nothing to compete for; only the log line is checked");
    CHECK_THAT(fit("pthread", 1), Catch::Contains("pthreads build, 1 thread"));
    CHECK_THAT(fit("openmp", 1), Catch::Contains("OpenMP build, 1 thread"));
    return;
  }
  const std::string pthreads = fit("pthread", 2);
  CHECK_THAT(pthreads, Catch::Contains("pthreads build, 2 threads"));
  CHECK_THAT(pthreads, Catch::Contains("warning: OpenBLAS"));
  CHECK_THAT(pthreads, Catch::Contains("compete for the cores"));

  // OpenBLAS's pthreads build reads OMP_NUM_THREADS too: one thread each, nothing to compete.
  const std::string one = fit("pthread", 1);
  CHECK_THAT(one, Catch::Contains("pthreads build, 1 thread"));
  CHECK_THAT(one, !Catch::Contains("compete for the cores"));

  const std::string openmp = fit("openmp", 2);
  CHECK_THAT(openmp, Catch::Contains("OpenMP build, 2 threads"));
  CHECK_THAT(openmp, !Catch::Contains("compete for the cores"));
}
#endif
