#!/usr/bin/env bash
# Shows exact resume on a real job: trains CONFIG uninterrupted, then trains it again while
# SIGKILLing it after KILL_AFTER seconds, resuming, sending SIGTERM after TERM_AFTER seconds
# (a preemption: checkpoint, exit 4) and resuming to the end; then compares the two runs' final
# weights and metrics.jsonl byte for byte.
#
#   tools/resume_demo.sh [CONFIG] [KILL_AFTER] [TERM_AFTER]
#   defaults: configs/fashion_mnist_cnn.yaml 50 45
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
config=${1:-$root/configs/fashion_mnist_cnn.yaml}
kill_after=${2:-50}
term_after=${3:-45}
trainer=$root/build/bin/trainer
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$trainer" fit "$config" --quiet --output "$work/full"
echo "uninterrupted: done"

"$trainer" fit "$config" --quiet --output "$work/cut" &
pid=$!
sleep "$kill_after"
kill -KILL "$pid"
wait "$pid" || echo "SIGKILL after ${kill_after}s: exit $?, newest checkpoint $(cat "$work/cut/latest")"

"$trainer" fit --resume "$work/cut" --quiet &
pid=$!
sleep "$term_after"
kill -TERM "$pid"
wait "$pid" || echo "SIGTERM after ${term_after}s: exit $?, checkpoint $(cat "$work/cut/latest")"

"$trainer" fit --resume "$work/cut" --quiet
echo "resumed: done"

final() { echo "$1/checkpoints/$(cat "$1/latest")"; }
cmp "$(final "$work/full")/model_0.pt" "$(final "$work/cut")/model_0.pt" &&
  echo "final weights: identical"
cmp "$work/full/metrics.jsonl" "$work/cut/metrics.jsonl" && echo "metrics.jsonl: identical"
tail -n 1 "$work/full/metrics.jsonl"
