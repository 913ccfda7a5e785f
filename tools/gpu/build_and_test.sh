#!/usr/bin/env bash
# Second half of the GPU toolkit, run on the GPU machine from the repository root with
# .gpu-deps/ (tools/gpu/fetch_deps.sh) beside it:
#   tools/gpu/build_and_test.sh [build] [bench] [search] [test]   (no stage named: all four)
# build:  unpacks the packages into a prefix and builds Crucible with ninja against the LibTorch
#         of the machine's PyTorch (torch.utils.cmake_prefix_path; no library preloaded); its CMake
#         package sets USE_C10D_NCCL, so the NCCL process group is built, with the PyTorch
#         wheel's own nccl.h (nvidia/.../nccl.h) first on the include path; gloo's
#         headers, which the wheel leaves out, come from Debian 13's libgloo-dev;
# bench:  bench_all's GPU benchmarks, one table: the Fashion-MNIST CNN job through trainer fit, a
#         hand-written LibTorch loop, plain PyTorch and Lightning when installed (BENCH_ROUNDS
#         rounds, default 1), and mixed precision against fp32 (bench_amp.py); then the CNN
#         job's trainer fit as configured and with one thing changed at a time (no loader
#         worker, 1,000 batches profiled with the loader worker and without it, test mode,
#         checkpoints or validation at the end only), each with its own account of where the
#         time went; then bench_loader (what the DataLoader adds to a step: with a worker or
#         none, copied ahead on a side stream or by the caller) and bench_overhead's step
#         overhead, both short (their own figures);
# search: a 2-trial grid search asking for 2 concurrent trials of 1 slot each, whose trial logs
#         and experiment.jsonl show where each trial ran and when (trials never share a GPU);
# test:   the whole suite, the fault-injection cases last; where the machine has no Slurm, the
#         launcher and search tests' one-node cluster runs Debian 12's (tools/gpu/slurm_env.sh).
# Stages run in the order above. With DEADLINE_S=N the script ends within N seconds of its
# start: each benchmark runs under the time left (what it printed before it was cut stays in the
# log) and is skipped when under 20 s are left, and the suite gets the time the other stages left
# (CTest's --stop-time), so that one call of the device tool brings everything back. Logs go to
# $OUT when set (the device tool), else to build-gpu/, seven files at most (gpu_setup.log,
# gpu_build.log, gpu_build_full.tail, gpu_bench.log, gpu_bench_table.md, gpu_search.log,
# gpu_ctest.log). Exits with 1 when the build fails, when a benchmark fails or is cut short or
# skipped by DEADLINE_S (the trainer fit variants' statuses are printed, not counted), or when
# the suite fails or a part of it is skipped; else 0.
set -uo pipefail
start=$(date +%s)
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
build=$root/build-gpu
logs=${OUT:-$build}
prefix=/tmp/crucible-gpu-deps
python=${PYTHON:-$(command -v python3)}
mkdir -p "$build" "$logs" "$prefix"
stamp() { echo "== $1 at +$(($(date +%s) - start)) s"; }
# Runs a command within the time DEADLINE_S leaves, less 10 s (without DEADLINE_S: as it is).
# Says that it was skipped and returns 125 when under 20 s are left; else returns the command's
# status (124: cut short). `timeout` runs the command in a process group of its own, which a
# signal to this script's group does not reach: a TERM, INT or HUP meanwhile is handed on to it
# and then ends the script.
deadline_child=""
within_deadline() {
  [ -n "${DEADLINE_S:-}" ] || { "$@"; return; }
  local left=$((start + DEADLINE_S - $(date +%s))) rc
  if [ "$left" -lt 20 ]; then
    echo "== skipped, ${left} s left of DEADLINE_S: $*"
    return 125
  fi
  timeout -k 5 "$((left - 10))" "$@" &
  deadline_child=$!
  trap 'kill -TERM "$deadline_child" 2>/dev/null; wait "$deadline_child"; exit 143' TERM INT HUP
  wait "$deadline_child"
  rc=$?
  trap - TERM INT HUP
  return "$rc"
}
# Whether CTest's stop time (25 s before DEADLINE_S) is still ahead: CTest takes a stop time
# already past as the same time tomorrow.
before_stop_time() {
  [ -z "${DEADLINE_S:-}" ] || [ "$(date +%s)" -lt $((start + DEADLINE_S - 25)) ]
}

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
# nccl.h: a PyTorch wheel's NCCL keeps it in its own package (nvidia/nccl/include or the like).
nccl_include=$("$python" - <<'EOF' 2>/dev/null
import glob, os
import nvidia
for base in nvidia.__path__:
    found = sorted(glob.glob(os.path.join(base, "**", "nccl.h"), recursive=True))
    if found:
        print(os.path.dirname(found[0]))
        break
EOF
)
{
  echo "== machine"
  # The system and its C library: whether Debian's Slurm and munge binaries could run here.
  (. /etc/os-release && echo "$PRETTY_NAME")
  ldd --version | head -n 1
  nvidia-smi -L
  "$python" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda,
"nccl", torch.cuda.nccl.version())'
  cmake --version | head -1
  echo "cores $(nproc), nccl.h in ${nccl_include:-(not found)}"
  # Which compilers there are, and whether the one CMake takes has a shared libstdc++ (the
  # top-level CMakeLists.txt links LibTorch's when it has not).
  for cxx in "${CXX:-}" c++ g++ /usr/bin/g++; do
    [ -n "$cxx" ] && command -v "$cxx" >/dev/null &&
      echo "$cxx: $(command -v "$cxx"), libstdc++.so: $("$cxx" -print-file-name=libstdc++.so)"
  done
} 2>&1 | tee "$logs/gpu_setup.log"

# Slurm for the tests' one-node cluster: where the machine has none, Debian 12's from the prefix.
if ! command -v srun >/dev/null || ! command -v munged >/dev/null; then
  . tools/gpu/slurm_env.sh
  slurm_env "$prefix" >>"$logs/gpu_setup.log" 2>&1
  tail -n 2 "$logs/gpu_setup.log"
fi

stages=${*:-build bench search test}
has() { [[ " $stages " == *" $1 "* ]]; }
status=0

configure() {
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="$torch_prefix;$prefix/usr" -DCRUCIBLE_PYTHON="$python" \
    "$@" 2>&1 | tee -a "$logs/gpu_setup.log"
  [ "${PIPESTATUS[0]}" -eq 0 ]
}
compile() {
  cmake --build "$build" -j "$(nproc)" -- -k 0 2>&1 | tee -a "$logs/gpu_build_full.log" |
    grep -E "error|warning:|FAILED|^\[[0-9]+/[0-9]+\] Linking" | tail -n 300 |
    tee -a "$logs/gpu_build.log"
  [ "${PIPESTATUS[0]}" -eq 0 ]
}

if has build; then
  stamp build
  built=0
  # The wheel's own nccl.h, the NCCL that its LibTorch loads, goes ahead of any other.
  nccl_flags=()
  [ -n "$nccl_include" ] && nccl_flags=(-DCMAKE_CXX_FLAGS="-isystem $nccl_include")
  configure "${nccl_flags[@]}" && compile && built=1
  tail -c 3000000 "$logs/gpu_build_full.log" > "$logs/gpu_build_full.tail"
  rm -f "$logs/gpu_build_full.log"
  stamp "build done"
  [ "$built" -eq 1 ] || exit 1
  {
    echo "== the C++ runtime the binaries load"
    readelf -d "$build/lib/libcrucible.so" | grep NEEDED
    ldd "$build/bin/trainer" | grep -E "stdc|gcc_s|torch_cpu"
  } 2>&1 | tee -a "$logs/gpu_setup.log"
fi

if has bench; then
  stamp bench
  within_deadline "$build/bin/bench_all" --only gpu,amp --rounds "${BENCH_ROUNDS:-1}" \
    --python "$python" --markdown "$logs/gpu_bench_table.md" 2>&1 | tee "$logs/gpu_bench.log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
  # Where the trainer fit job's time goes: its own account (training, waiting for data,
  # validation, checkpoints) beside the whole process's wall time, as configured and with one
  # thing changed at a time; the phases of 1,000 profiled batches (no device waits added), with
  # the loader worker and without it; the start-up alone (test mode: one batch, one validation
  # batch, a checkpoint round trip).
  variant() {
    local name=$1 out=/tmp/crucible-gpu-cnn began
    shift
    rm -rf "$out"
    began=$(date +%s%N)
    local rc=0
    within_deadline "$build/bin/trainer" fit configs/fashion_mnist_cnn.yaml --quiet \
      --output "$out" "$@" || rc=$?
    [ "$rc" -ne 125 ] || return 0
    echo "== trainer fit configs/fashion_mnist_cnn.yaml, $name: $((($(date +%s%N) - began) / 1000000)) ms"
    [ "$rc" -eq 0 ] || echo "== ... which exited with status $rc (124: cut short by DEADLINE_S)"
    grep -E "INFO done:" -A 1 "$out/trainer.log"
  }
  profiled=(--set profiling.enabled=true --set profiling.begin_on_batch=1000
            --set profiling.end_after_batch=1999 --set profiling.sync_timings=false)
  {
    variant "as configured"
    grep -E "\[checkpoint\]|\[validation\]" /tmp/crucible-gpu-cnn/trainer.log 2>/dev/null | head -n 4
    variant "no loader worker" --set data.workers=0
    variant "profiled, batches 1000-1999" "${profiled[@]}"
    tail -n 3 /tmp/crucible-gpu-cnn/profiling/metrics.jsonl 2>/dev/null
    variant "profiled, batches 1000-1999, no loader worker" "${profiled[@]}" --set data.workers=0
    tail -n 3 /tmp/crucible-gpu-cnn/profiling/metrics.jsonl 2>/dev/null
    variant "test mode (start-up)" --test-mode
    variant "checkpoints at the end only" --set min_checkpoint_period.batches=1000000 \
      --set checkpoint_policy=none
    variant "validation (and the checkpoints after it) at the end only" \
      --set min_validation_period.epochs=6
  } 2>&1 | tee -a "$logs/gpu_bench.log"
  # The loader's own cost on the device, one process: the worker and the side stream apart.
  within_deadline "$build/bin/bench_loader" --batches 600 --rounds 3 2>&1 |
    tee -a "$logs/gpu_bench.log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
  within_deadline "$build/bin/bench_overhead" --python "$python" --batches 600 --rounds 3 2>&1 |
    tee -a "$logs/gpu_bench.log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
fi

if has search; then
  stamp search
  out=/tmp/crucible-gpu-search
  rm -rf "$out"
  within_deadline "$build/bin/trainer" fit configs/fashion_mnist_cnn.yaml --output "$out" \
    --set 'hyperparameters.lr={type: categorical, vals: [0.001, 0.002]}' \
    --set searcher.name=grid --set searcher.max_concurrent_trials=2 \
    --set max_length.epochs=1 2>&1 | tail -n 40 | tee "$logs/gpu_search.log"
  {
    echo "== experiment.log"
    cat "$out/experiment.log"
    echo "== experiment.jsonl"
    cat "$out/experiment.jsonl"
    for log in "$out"/trials/*/trainer.log; do
      echo "== $log"
      head -n 3 "$log"
    done
  } >> "$logs/gpu_search.log" 2>&1
fi

if has test; then
  stamp test
  # The fault-injection cases (each a run failed at every I/O call in turn) run last.
  slow='full disk|disk that fills|I/O error|look-up of any path|fails with an I/O error'
  stop=()
  if [ -n "${DEADLINE_S:-}" ]; then
    stop=(--stop-time "$(date -d "@$((start + DEADLINE_S - 25))" +%H:%M:%S)")
  fi
  : >"$logs/gpu_ctest.log"
  for part in fast slow; do
    if ! before_stop_time; then
      echo "== the $part tests skipped: DEADLINE_S is reached" | tee -a "$logs/gpu_ctest.log"
      status=1
      continue
    fi
    select=(-E "$slow")
    [ "$part" = fast ] || select=(-R "$slow")
    ctest --test-dir "$build" -j 12 "${select[@]}" --output-on-failure "${stop[@]}" 2>&1 |
      tee -a "$logs/gpu_ctest.log"
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
    stamp "$part tests done"
  done
fi
exit "$status"
