#!/usr/bin/env bash
# Builds and tests Crucible against LibTorch 2.x in a Debian 13 ("trixie") root.
#
# The root is made once with mmdebstrap from Debian's registry and cached on this machine (it is
# remade when the package list below changes). Each call enters it in a private mount namespace
# (so nothing stays mounted afterwards), with this checkout at /src, the build tree in
# build-trixie/ and a ccache of its own, then configures, builds with -j2 and runs CTest.
#
#   tools/ci/trixie.sh                 build, then the whole suite
#   tools/ci/trixie.sh -R safetensors  build, then CTest with these arguments
#   tools/ci/trixie.sh --shell         build, then a shell inside the root
#   tools/ci/trixie.sh --build-only    build only
#   tools/ci/trixie.sh --exec CMD...   configure, then run CMD in /src inside the root
#   tools/ci/trixie.sh --cuda [...]     the same in a second root, which holds Debian 13's CUDA
#                                       build of LibTorch 2.6 (contrib, with CUDA 12.4 and NCCL
#                                       2.22 from non-free), tree in build-trixie-cuda/; with no
#                                       other option it builds and runs nothing (see below)
#
# The CUDA root proves on a machine without a GPU that the code which LibTorch's CUDA build
# switches on (USE_C10D_NCCL: the NCCL process group and its shutdown) compiles against 2.x with
# no warning: the library, the trials and trainer build with -Werror. Nothing there can run:
# libtorch_cuda needs cuDNN, which Debian only downloads from NVIDIA at install time (declined
# here), so executables link with --allow-shlib-undefined, which relaxes only the references of
# the libraries they load, never their own. The tests are not built there.
#
# Environment: CRUCIBLE_CACHE (default /var/cache/crucible) holds the roots and their ccaches.
# Requires root (mmdebstrap, mount and chroot), as CI runs.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cache=${CRUCIBLE_CACHE:-/var/cache/crucible}
mirror=${CRUCIBLE_DEBIAN_MIRROR:-http://deb.debian.org/debian}

# What a root holds: the same roles as tools/setup.sh installs on Debian 12, in trixie's names.
common=(build-essential cmake ccache binutils libyaml-cpp-dev nlohmann-json3-dev libfmt-dev
        zlib1g-dev catch2)
if [ "${1:-}" = --cuda ]; then
  shift
  flavor=trixie-cuda
  components="main contrib non-free"
  packages=("${common[@]}" libtorch-cuda-dev libgloo-cuda-dev libnccl-dev nvidia-cuda-toolkit)
  configure_args=(-DCRUCIBLE_BUILD_TESTS=OFF -DCRUCIBLE_BUILD_BENCHMARKS=OFF -Wno-dev
                  -DCMAKE_CXX_FLAGS=-Werror -DCMAKE_EXE_LINKER_FLAGS=-Wl,--allow-shlib-undefined)
else
  flavor=trixie
  components="main"
  # OpenBLAS in both builds, the OpenMP one selected (tools/openblas_openmp.sh, as tools/setup.sh
  # does). Beside the libraries, what the suite runs: Python with torch and safetensors (the weight
  # tests), protobuf and crcmod (the TensorBoard test), Open MPI and Slurm (the launcher tests),
  # the dataset (the end-to-end tests).
  packages=("${common[@]}" libtorch-dev libgloo-dev libopenblas0-openmp libopenblas0-pthread
            python3-torch python3-safetensors python3-protobuf python3-crcmod openmpi-bin slurmd
            slurmctld slurm-client munge dataset-fashion-mnist)
  configure_args=()
fi
rootfs=$cache/$flavor-root
# The stamp also holds a digest of the script that selects the BLAS, so that a change to it remakes
# the root.
blas_hook="$repo/tools/openblas_openmp.sh"
stamp_text="trixie $components ${packages[*]} $(sha256sum <"$blas_hook" | cut -c1-16)"

if [ "$(id -u)" -ne 0 ]; then
  echo "trixie.sh: needs root (mmdebstrap, mount, chroot)" >&2
  exit 2
fi

if ! command -v mmdebstrap >/dev/null; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mmdebstrap >/dev/null
fi

if [ "$(cat "$rootfs/.crucible-stamp" 2>/dev/null)" != "$stamp_text" ]; then
  echo "trixie.sh: making the Debian 13 root in $rootfs (cached for later runs)"
  rm -rf "$rootfs" "$rootfs.new"
  mkdir -p "$cache"
  include=$(IFS=,; echo "${packages[*]}")
  # nvidia-cudnn, which libtorch-cuda needs, asks to download cuDNN from NVIDIA: declined.
  mmdebstrap --variant=apt --include="$include" --components="$components" \
    --aptopt='APT::Install-Recommends "false"' \
    --essential-hook='echo "nvidia-cudnn nvidia-cudnn/question select I Decline" |
      chroot "$1" debconf-set-selections' \
    --customize-hook="chroot \"\$1\" bash -s < $(printf %q "$blas_hook")" \
    --customize-hook='rm -rf "$1"/var/cache/apt/archives/*.deb' \
    trixie "$rootfs.new" "$mirror"
  echo "$stamp_text" >"$rootfs.new/.crucible-stamp"
  mv "$rootfs.new" "$rootfs"
fi

mkdir -p "$cache/ccache-$flavor"
shell=0
ctest_args=()
case "${1:-}" in
  --shell) shell=1 ;;
  --build-only) shell=2 ;;
  --exec) shell=3; shift; ctest_args=("$@") ;;
  *) ctest_args=("$@") ;;
esac
# The CUDA root has no test suite: a plain call builds.
if [ "$flavor" = trixie-cuda ] && [ "$shell" = 0 ]; then shell=2; fi

# Runs inside the new mount namespace: bind the kernel file systems, the checkout and the cache,
# then build and test in the chroot.
inner=$(cat <<'EOF'
set -euo pipefail
r=$1; repo=$2; cache=$3; flavor=$4; configure_args=$5; shell=$6; shift 6
mount -t proc proc "$r/proc"
mount --rbind /sys "$r/sys"
mount --rbind /dev "$r/dev"
mkdir -p "$r/src" "$r/root/.ccache" "$r/run/shm"
mount --bind "$repo" "$r/src"
mount --bind "$cache/ccache-$flavor" "$r/root/.ccache"
mount -t tmpfs tmpfs "$r/tmp"
tree=build-$flavor
configure="cd /src && cmake -S . -B $tree -DCMAKE_BUILD_TYPE=Release $configure_args >/dev/null"
build="$configure && cmake --build $tree -j2"
run=(chroot "$r" /usr/bin/env -i HOME=/root PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8)
case "$shell" in
  3) exec "${run[@]}" bash -c "$configure && \"\$@\"" exec "$@" ;;
  2) exec "${run[@]}" bash -c "$build" ;;
  1) exec "${run[@]}" TERM="${TERM:-dumb}" bash -c "$build && exec bash -i" ;;
esac
exec "${run[@]}" bash -c "$build && ctest --test-dir $tree -j2 --output-on-failure \"\$@\"" \
  ctest "$@"
EOF
)
exec unshare --mount --propagation private bash -c "$inner" inner "$rootfs" "$repo" "$cache" \
  "$flavor" "${configure_args[*]}" "$shell" "${ctest_args[@]}"
