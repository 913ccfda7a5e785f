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
#
# Environment: CRUCIBLE_CACHE (default /var/cache/crucible) holds the root and its ccache.
# Requires root (mmdebstrap, mount and chroot), as CI runs.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cache=${CRUCIBLE_CACHE:-/var/cache/crucible}
rootfs=$cache/trixie-root
mirror=${CRUCIBLE_DEBIAN_MIRROR:-http://deb.debian.org/debian}

# What the root holds: the same roles as tools/setup.sh installs on Debian 12, in trixie's names,
# plus python3-safetensors for the weight tests.
packages=(
  build-essential cmake ccache binutils
  libtorch-dev libgloo-dev libopenblas0-pthread
  libyaml-cpp-dev nlohmann-json3-dev libfmt-dev zlib1g-dev
  catch2 python3-torch python3-safetensors openmpi-bin
  slurmd slurmctld slurm-client munge
  dataset-fashion-mnist
)
stamp_text="trixie ${packages[*]}"

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
  mmdebstrap --variant=apt --include="$include" \
    --aptopt='APT::Install-Recommends "false"' \
    --customize-hook='rm -rf "$1"/var/cache/apt/archives/*.deb' \
    trixie "$rootfs.new" "$mirror"
  echo "$stamp_text" >"$rootfs.new/.crucible-stamp"
  mv "$rootfs.new" "$rootfs"
fi

mkdir -p "$cache/ccache-trixie"
shell=0
ctest_args=()
case "${1:-}" in
  --shell) shell=1 ;;
  --build-only) shell=2 ;;
  --exec) shell=3; shift; ctest_args=("$@") ;;
  *) ctest_args=("$@") ;;
esac

# Runs inside the new mount namespace: bind the kernel file systems, the checkout and the cache,
# then build and test in the chroot.
inner=$(cat <<'EOF'
set -euo pipefail
r=$1; repo=$2; cache=$3; shell=$4; shift 4
mount -t proc proc "$r/proc"
mount --rbind /sys "$r/sys"
mount --rbind /dev "$r/dev"
mkdir -p "$r/src" "$r/root/.ccache" "$r/run/shm"
mount --bind "$repo" "$r/src"
mount --bind "$cache/ccache-trixie" "$r/root/.ccache"
mount -t tmpfs tmpfs "$r/tmp"
build='cd /src && cmake -S . -B build-trixie -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build build-trixie -j2'
if [ "$shell" = 3 ]; then
  exec chroot "$r" /usr/bin/env -i HOME=/root PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 \
    bash -c 'cd /src && cmake -S . -B build-trixie -DCMAKE_BUILD_TYPE=Release >/dev/null && "$@"' \
    exec "$@"
fi
if [ "$shell" = 2 ]; then
  exec chroot "$r" /usr/bin/env -i HOME=/root PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 \
    bash -c "$build"
fi
if [ "$shell" = 1 ]; then
  exec chroot "$r" /usr/bin/env -i HOME=/root TERM="${TERM:-dumb}" PATH=/usr/sbin:/usr/bin:/sbin:/bin \
    bash -c "$build && exec bash -i"
fi
exec chroot "$r" /usr/bin/env -i HOME=/root PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 \
  bash -c "$build && ctest --test-dir build-trixie -j2 --output-on-failure \"\$@\"" ctest "$@"
EOF
)
exec unshare --mount --propagation private \
  bash -c "$inner" inner "$rootfs" "$repo" "$cache" "$shell" "${ctest_args[@]}"
