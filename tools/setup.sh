#!/usr/bin/env bash
# Installs Crucible's Debian dependencies (DESIGN.md §4) when missing, then configures and builds
# a Release tree in build/ with -j2. Idempotent; uses sudo only when not root.
#
#   tools/setup.sh            install, configure, build
#   BUILD_DIR=out tools/setup.sh   build somewhere else
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${BUILD_DIR:-$root/build}

packages=(
  build-essential cmake ccache
  libtorch-dev libgloo-dev libopenblas0-openmp libopenblas0-pthread
  libyaml-cpp-dev nlohmann-json3-dev libfmt-dev zlib1g-dev
  catch2 python3-torch python3-protobuf python3-crcmod openmpi-bin
  slurmd slurmctld slurm-client munge
  dataset-fashion-mnist
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}"
fi

# LibTorch's matrix products on OpenBLAS's OpenMP build, which shares LibTorch's threads. The
# pthreads build stays installed: tests/util's BLAS test runs trainer on both.
SUDO=$sudo "$root/tools/openblas_openmp.sh"

cmake -S "$root" -B "$build_dir" -DCMAKE_BUILD_TYPE=Release
cmake --build "$build_dir" -j2
