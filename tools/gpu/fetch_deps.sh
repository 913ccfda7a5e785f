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
# Slurm and munge for the launcher and search tests' one-node cluster, with the libraries their
# programs and basic plugins link beyond the C library: the GPU machine takes from these only the
# ones it lacks (tools/gpu/slurm_env.sh).
packages+=(
  slurmd slurmctld slurm-client slurm-wlm-basic-plugins munge libmunge2 libhwloc15 libjson-c5
  liblua5.1-0 liblz4-1 libyaml-0-2 libnuma1 libcap-ng0 libcap2 libaudit1 libdbus-1-3
  libreadline8 libtinfo6 libgcrypt20 libgpg-error0 liblzma5 libbz2-1.0 libzstd1 libsystemd0
  libudev1 libpam0g libssl3 zlib1g
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
