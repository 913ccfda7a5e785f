#!/usr/bin/env bash
# Second half of the GPU toolkit, run on the GPU machine from the repository root with
# .gpu-deps/ (tools/gpu/fetch_deps.sh) beside it:
#   tools/gpu/build_and_test.sh [build] [test] [bench]     (no stage named: all three)
# build: unpacks the packages into a prefix and builds Crucible with ninja against the LibTorch
#        of the machine's PyTorch (torch.utils.cmake_prefix_path; no library preloaded);
# test:  runs the whole suite;
# bench: runs tools/bench/bench_all, every benchmark and one table of their figures (the
#        Fashion-MNIST CNN job through trainer fit, a hand-written LibTorch loop, plain PyTorch
#        and Lightning when installed, BENCH_ROUNDS rounds, default 2; the step overhead; the
#        checkpoint cost; data-parallel on the CPU; mixed precision against fp32 with
#        bench_amp.py), the table also in $OUT/gpu_bench_table.md.
# The stages are split to fit the device tool's 10 minutes per call (not yet seen on a GPU
# machine); build-gpu/ stays between calls. Logs go to
# $OUT when set (the device tool), else to build-gpu/. Exits with the suite's status, or 1 when
# the build or a benchmark fails.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
build=$root/build-gpu
logs=${OUT:-$build}
prefix=/tmp/crucible-gpu-deps
python=${PYTHON:-$(command -v python3)}
mkdir -p "$build" "$logs" "$prefix"

for deb in .gpu-deps/*.deb; do dpkg -x "$deb" "$prefix"; done
# The example configs read Fashion-MNIST from where Debian's package puts it.
if [ ! -e /usr/share/datasets/fashion-mnist ]; then
  mkdir -p /usr/share/datasets
  ln -s "$prefix/usr/share/datasets/fashion-mnist" /usr/share/datasets/fashion-mnist
fi

# The TensorBoard test reads event files with protobuf and crcmod: where the machine's Python
# lacks them, Debian's are searched after its own (pure Python: any Python 3 runs them).
if ! "$python" -c 'import google.protobuf, crcmod' 2>/dev/null; then
  export CRUCIBLE_PYTHON_FALLBACK_PATH=$prefix/usr/lib/python3/dist-packages
  "$python" -c 'import google.protobuf' 2>/dev/null ||
    export PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python
fi

torch_prefix=$("$python" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')
{
  echo "== machine"
  nvidia-smi -L
  "$python" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda,
"nccl", torch.cuda.nccl.version())'
  cmake --version | head -1
} 2>&1 | tee "$logs/gpu_machine.log"

stages=${*:-build test bench}
has() { [[ " $stages " == *" $1 "* ]]; }
status=0

if has build; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="$torch_prefix;$prefix/usr" -DCRUCIBLE_PYTHON="$python" \
    2>&1 | tee "$logs/gpu_configure.log" || exit 1
  cmake --build "$build" -j "$(nproc)" 2>&1 | tail -n 200 | tee "$logs/gpu_build.log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || exit 1
fi

if has test; then
  ctest --test-dir "$build" -j 8 --output-on-failure 2>&1 | tee "$logs/gpu_ctest.log"
  status=${PIPESTATUS[0]}
fi

if has bench; then
  "$build/bin/bench_all" --rounds "${BENCH_ROUNDS:-2}" --python "$python" \
    --markdown "$logs/gpu_bench_table.md" 2>&1 | tee "$logs/gpu_bench.log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || exit 1
fi
exit "$status"
