#!/usr/bin/env bash
# Trains CONFIG on 1 slot, then on SLOTS slots through each way of starting a distributed run:
# the built-in launcher, mpirun (Open MPI) and torchrun's environment contract (the variables
# torchrun's agent sets, one `trainer fit` per rank, OMP_NUM_THREADS=1 included). Prints each
# run's final validation metrics and wall time. Results depend on each process's thread count
# (convolution kernels sum in another order): the built-in launcher gives each worker
# cores / slots threads, mpirun binds each rank to one core, torchrun sets OMP_NUM_THREADS=1.
#
#   tools/dist_accuracy.sh [CONFIG] [SLOTS]
#   defaults: configs/fashion_mnist_cnn.yaml 2
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
config=${1:-$root/configs/fashion_mnist_cnn.yaml}
slots=${2:-2}
trainer=$root/build/bin/trainer
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

report() {  # NAME RUN_DIR SECONDS
  printf '%-28s %5ss  %s\n' "$1" "$3" "$(tail -n 1 "$2/metrics.jsonl")"
}

timed() {  # NAME RUN_DIR COMMAND...
  local name=$1 run=$2 start=$SECONDS
  shift 2
  "$@"
  report "$name" "$run" $((SECONDS - start))
}

torchrun_env() {  # RANK PORT
  local rank=$1 port=$2
  timeout 3600 env RANK="$rank" LOCAL_RANK="$rank" GROUP_RANK=0 ROLE_RANK="$rank" \
    WORLD_SIZE="$slots" LOCAL_WORLD_SIZE="$slots" GROUP_WORLD_SIZE=1 ROLE_WORLD_SIZE="$slots" \
    MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" TORCHELASTIC_RESTART_COUNT=0 \
    TORCHELASTIC_USE_AGENT_STORE=False OMP_NUM_THREADS=1 \
    "$trainer" fit "$config" --quiet --slots "$slots" --output "$work/torchrun"
}

torchrun_all() {
  local port pids=()
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  for ((r = 0; r < slots; r++)); do
    torchrun_env "$r" "$port" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p"; done
}

timed "1 slot" "$work/one" "$trainer" fit "$config" --quiet --slots 1 --output "$work/one"
timed "$slots slots, built-in" "$work/builtin" \
  "$trainer" fit "$config" --quiet --slots "$slots" --output "$work/builtin"
timed "$slots slots, mpirun" "$work/mpirun" mpirun --allow-run-as-root --oversubscribe \
  -n "$slots" "$trainer" fit "$config" --quiet --slots "$slots" --output "$work/mpirun"
timed "$slots slots, torchrun env" "$work/torchrun" torchrun_all
