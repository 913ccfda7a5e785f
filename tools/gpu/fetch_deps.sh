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

# A PyTorch wheel's LibTorch leaves out gloo's headers, which its ProcessGroupGloo.hpp includes
# (the library itself is inside libtorch_cpu). Debian 13's libgloo-dev has them (gloo of December
# 2023; PyTorch 2.11's header compiled against them): only its headers are used, so only that
# package is downloaded, through a Debian 13 package list of its own.
mirror=${CRUCIBLE_DEBIAN_MIRROR:-http://deb.debian.org/debian}
lists=$(mktemp -d)
trap 'rm -rf "$lists"' EXIT
mkdir -p "$lists/state/lists/partial" "$lists/cache/archives/partial"
echo "deb $mirror trixie main" > "$lists/sources.list"
trixie=(-o "Dir::Etc::SourceList=$lists/sources.list" -o Dir::Etc::SourceParts=/dev/null
        -o "Dir::State=$lists/state" -o "Dir::Cache=$lists/cache")
apt-get "${trixie[@]}" update -qq
apt-get "${trixie[@]}" download libgloo-dev
du -sh "$out"
