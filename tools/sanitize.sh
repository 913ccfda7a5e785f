#!/usr/bin/env bash
# Builds Crucible with AddressSanitizer and UndefinedBehaviorSanitizer in build-sanitize/ and runs
# the CTest suite there (Debian 12's toolchain; run tools/setup.sh once first for the packages).
# Any invalid access (use after free, buffer overflow) or undefined behaviour in our code aborts
# the process that did it, so the test that ran it fails and its output names the place.
# LibTorch itself is not instrumented. Leak detection is off: LibTorch keeps process-lifetime
# allocations that LeakSanitizer would report at every exit.
#
#   tools/sanitize.sh                 build, then the whole suite
#   tools/sanitize.sh -R data         build, then CTest with these arguments
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${BUILD_DIR:-$root/build-sanitize}

# -O1 -g1: line numbers in reports at a fraction of -O2 -g's compile time under LibTorch's headers.
cmake -S "$root" -B "$build_dir" -DCMAKE_BUILD_TYPE=Sanitize -DCMAKE_CXX_FLAGS_SANITIZE="-O1 -g1" \
  -DCRUCIBLE_SANITIZE=address,undefined -DCRUCIBLE_BUILD_BENCHMARKS=OFF
cmake --build "$build_dir" -j2

export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
ctest --test-dir "$build_dir" -j2 --output-on-failure "$@"
