#!/usr/bin/env bash
# Selects OpenBLAS's OpenMP build (Debian's libopenblas0-openmp) for libopenblas.so.0,
# libblas.so.3 and liblapack.so.3, each where Debian's alternatives system is in auto mode (a
# choice made by hand is kept). LibTorch runs its CPU operators on OpenMP threads; the pthreads
# build of OpenBLAS, which Debian prefers, runs a pool of its own beside them, and the two compete
# for the cores (BENCHMARKS.md, "CPU threads"). Idempotent. Changes are made through $SUDO
# (empty when run as root), so that the queries need no privilege.
#
#   tools/openblas_openmp.sh              on this machine
#   chroot ROOT bash -s < tools/openblas_openmp.sh    inside a root (tools/ci/trixie.sh)
set -euo pipefail

command -v update-alternatives >/dev/null || exit 0
update-alternatives --get-selections |
  awk '$1 ~ /^(libopenblas\.so\.0|libblas\.so\.3|liblapack\.so\.3)-/ && $2 == "auto" {print $1}' |
  while read -r name; do
    target=$(update-alternatives --list "$name" | grep /openblas-openmp/ || true)
    [ -n "$target" ] || continue
    ${SUDO:-} update-alternatives --set "$name" "$target"
  done
