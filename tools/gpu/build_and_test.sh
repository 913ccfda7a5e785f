#!/usr/bin/env bash
# Second half of the GPU toolkit, run on the GPU machine from the repository root with
# .gpu-deps/ (tools/gpu/fetch_deps.sh) beside it: unpacks the packages into a prefix, builds
# Crucible with ninja against the LibTorch of the machine's PyTorch (torch.utils.cmake_prefix_path;
# no library preloaded), runs the whole suite, then the GPU benchmark (tools/bench/bench_gpu: the
# Fashion-MNIST CNN job through trainer fit, a hand-written LibTorch loop, plain PyTorch and
# Lightning when installed; BENCH_ROUNDS rounds, default 3) and tools/bench/bench_amp.py (mixed
# precision against fp32, AMP_EPOCHS epochs, default 2). Logs go to $OUT when set (the device
# tool), else to build-gpu/. Exits with the suite's status, or 1 when the build or benchmark fails.
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

cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$torch_prefix;$prefix/usr" -DCRUCIBLE_PYTHON="$python" \
  2>&1 | tee "$logs/gpu_configure.log" || exit 1
cmake --build "$build" -j "$(nproc)" 2>&1 | tail -n 200 | tee "$logs/gpu_build.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || exit 1

ctest --test-dir "$build" -j 8 --output-on-failure 2>&1 | tee "$logs/gpu_ctest.log"
suite=${PIPESTATUS[0]}

"$build/bin/bench_gpu" --rounds "${BENCH_ROUNDS:-3}" --python "$python" 2>&1 |
  tee "$logs/gpu_bench.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || exit 1

# Mixed precision (fp32, bf16, fp16 with the gradient scaler) on the CNN and a wide MLP.
"$python" tools/bench/bench_amp.py "$build/bin/trainer" --epochs "${AMP_EPOCHS:-2}" 2>&1 |
  tee "$logs/gpu_bench_amp.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || exit 1
exit "$suite"
