#!/usr/bin/env python3
"""Mixed precision against full precision, through `trainer fit`.

bench_amp.py TRAINER [--epochs N] [--precisions none,bf16,fp16] [--jobs cnn,wide_mlp] [--out DIR]
             [--table FILE]

Runs two jobs at each precision (optimizations.mixed_precision), each as a fresh `trainer fit`:
  cnn: configs/fashion_mnist_cnn.yaml, the main job;
  wide_mlp: configs/fashion_mnist_mlp.yaml with 4096-wide hidden layers and batches of 512,
            where matrix products dominate the step.
A run's step rate is the median of its training reports' batches per second (trainer.log), the
first report left out, so start-up, validation and checkpoints do not count. Prints, per job and
precision, that rate, its ratio to the job's full-precision rate (the speed-up) and the final
test accuracy. fp16 needs CUDA: on a CPU its row shows trainer's refusal. With --table, appends
each mixed-precision rate beside its job's full-precision rate to FILE, as bench_all's rows.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
JOBS = {
    "cnn": ("configs/fashion_mnist_cnn.yaml", []),
    "wide_mlp": ("configs/fashion_mnist_mlp.yaml",
                 ["hyperparameters.hidden1=4096", "hyperparameters.hidden2=4096",
                  "hyperparameters.global_batch_size=512", "scheduling_unit=20"]),
}
RATE = re.compile(r"\[training\s*\].*\(([0-9.]+) batches/s\)")


def run(trainer, config, sets, out):
    """Fits `config` with `sets` into `out`; returns (batches/s, accuracy) or an error line."""
    cmd = [trainer, "fit", os.path.join(ROOT, config), "--quiet", "--output", out]
    for s in sets:
        cmd += ["--set", s]
    done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if done.returncode != 0:
        lines = [l for l in done.stdout.splitlines() if l.strip()]
        return lines[-1] if lines else f"exit {done.returncode}"
    with open(os.path.join(out, "trainer.log")) as log:
        rates = [float(m.group(1)) for m in map(RATE.search, log) if m]
    accuracy = None
    with open(os.path.join(out, "metrics.jsonl")) as rows:
        for row in map(json.loads, rows):
            if row["type"] == "validation":
                accuracy = row["metrics"].get("validation_accuracy")
    return statistics.median(rates[1:] or rates), accuracy


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trainer")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--precisions", default="none,bf16,fp16")
    parser.add_argument("--jobs", default=",".join(JOBS))
    parser.add_argument("--out", default=None, help="keep the runs here")
    parser.add_argument("--table", default=None, help="append the table rows here")
    args = parser.parse_args()
    out = args.out or tempfile.mkdtemp(prefix="bench_amp-")
    print(f"{'job':<9} {'precision':<9} {'batches/s':>10} {'speed-up':>9} {'accuracy':>9}")
    for job in args.jobs.split(","):
        config, sets = JOBS[job]
        base = None
        for precision in args.precisions.split(","):
            result = run(args.trainer, config,
                         sets + [f"max_length.epochs={args.epochs}",
                                 f"optimizations.mixed_precision={precision}"],
                         os.path.join(out, f"{job}-{precision}"))
            if isinstance(result, str):
                print(f"{job:<9} {precision:<9} {result}")
                continue
            rate, accuracy = result
            base = base or (rate if precision == "none" else None)
            speedup = f"{rate / base:.2f}" if base else "-"
            acc = f"{accuracy:.4f}" if accuracy is not None else "-"
            print(f"{job:<9} {precision:<9} {rate:>10.1f} {speedup:>9} {acc:>9}", flush=True)
            if args.table and base and precision != "none":
                row = {"benchmark": "bench_amp",
                       "measure": f"{job} training step rate, {precision} autocast",
                       "unit": "batches/s", "crucible": rate,
                       "reference_name": "the same job in fp32", "reference": base,
                       "higher_is_better": True, "goal": 0}
                with open(args.table, "a") as table:
                    table.write(json.dumps(row) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
