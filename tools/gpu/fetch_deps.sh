#!/usr/bin/env bash
# First half of the GPU toolkit, run on a machine that reaches Debian's registry: downloads the
# Debian 12 packages Crucible builds and tests with, other than LibTorch (the GPU machine has
# PyTorch with CUDA), into .gpu-deps/ (ignored by git). Carry that folder to the GPU machine
# (the device tool's `carry`) and run tools/gpu/build_and_test.sh there.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=${1:-$root/.gpu-deps}
packages=(
  libyaml-cpp-dev libyaml-cpp0.7 nlohmann-json3-dev libfmt-dev libfmt9 catch2 zlib1g-dev
  dataset-fashion-mnist python3-protobuf python3-crcmod
)
mkdir -p "$out"
cd "$out"
rm -f ./*.deb
apt-get download "${packages[@]}"
du -sh "$out"
