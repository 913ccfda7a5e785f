#!/usr/bin/env bash
# Fuzzes Crucible's readers of files and values (tests/fuzz/fuzz_targets.h) with libFuzzer. Builds
# their binary, fuzz_crucible, with clang, AddressSanitizer and UndefinedBehaviorSanitizer in
# build-fuzz/ (run tools/setup.sh once first; clang is installed when missing), then runs each
# target from its seeds and its corpus in tests/fuzz/corpus/<target>/. An input that crashes a
# reader, trips a sanitizer or escapes as anything but crucible::Error is written to
# build-fuzz/findings/<target>/ and ends that target's run with a non-zero status.
#
#   tools/fuzz.sh                         every target, 60 s each
#   tools/fuzz.sh torch_pickle 600        one target (or a comma-separated list), 600 s
#   MERGE=1 tools/fuzz.sh ...             then fold the inputs that reached new code, minimized,
#                                         into tests/fuzz/corpus/<target>/ (commit them: CTest
#                                         replays that corpus)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${BUILD_DIR:-$root/build-fuzz}
seconds=${2:-60}

if ! command -v clang++ >/dev/null; then
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq clang
fi

cmake -S "$root" -B "$build_dir" -DCMAKE_BUILD_TYPE=Fuzz -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_CXX_FLAGS_FUZZ="-O1 -g1" -DCRUCIBLE_SANITIZE=address,undefined,fuzzer-no-link \
  -DCRUCIBLE_FUZZ=ON -DCRUCIBLE_BUILD_BENCHMARKS=OFF
cmake --build "$build_dir" -j2 --target fuzz_crucible
fuzzer="$build_dir/bin/fuzz_crucible"
if [ -n "${1:-}" ]; then IFS=, read -r -a targets <<<"$1"; else mapfile -t targets < <("$fuzzer"); fi

# LibTorch keeps process-lifetime allocations: leaks are not findings.
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
status=0
for t in "${targets[@]}"; do
  seeds="$build_dir/seeds/$t" work="$build_dir/corpus/$t" findings="$build_dir/findings/$t"
  mkdir -p "$seeds" "$work" "$findings" "$root/tests/fuzz/corpus/$t"
  export CRUCIBLE_FUZZ_TARGET=$t
  CRUCIBLE_FUZZ_SEEDS="$seeds" "$fuzzer"
  echo "fuzz: $t for ${seconds}s"
  if ! "$fuzzer" -max_total_time="$seconds" -timeout=20 -rss_limit_mb=4096 \
      -max_len=65536 -artifact_prefix="$findings/" -print_final_stats=1 \
      "$work" "$seeds" "$root/tests/fuzz/corpus/$t"; then
    echo "fuzz: $t found a bug; the input is in $findings/"
    status=1
  fi
  if [ "${MERGE:-0}" = 1 ]; then
    "$fuzzer" -merge=1 -max_len=65536 "$root/tests/fuzz/corpus/$t" "$work"
  fi
done
exit $status
