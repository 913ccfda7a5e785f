#!/usr/bin/env bash
# Builds Crucible and runs the whole CTest suite in both LibTorch generations:
#   debian12  this machine: tools/setup.sh (Debian 12, LibTorch 1.13, Catch2 2), tree in build/
#   debian13  a cached Debian 13 root: tools/ci/trixie.sh (LibTorch 2.6, Catch2 3), build-trixie/
# and on request a third:
#   debian13-cuda  a second cached root with Debian 13's CUDA build of LibTorch 2.6:
#             tools/ci/trixie.sh --cuda, build-trixie-cuda/; builds with -Werror, runs no test
#             (no GPU here; see trixie.sh). About 10 min more on a cold machine, so CI leaves it
#             out; run it after changing code that only CUDA builds compile.
# Each environment runs even when another failed. At the end it prints each one's CTest summary
# (with the names of failed tests) and its wall time, and exits 1 if any failed to build or had a
# failing test. Uses sudo only when not root.
#
#   tools/test.sh                         debian12 and debian13 (what .ci/run calls)
#   tools/test.sh --cuda                  debian12, debian13 and debian13-cuda
#   CRUCIBLE_TEST_ENVS=debian12 tools/test.sh   the ones named
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
default_envs="debian12 debian13"
case "${1:-}" in
  "") ;;
  --cuda) default_envs="debian12 debian13 debian13-cuda" ;;
  *) echo "usage: tools/test.sh [--cuda]" >&2; exit 2 ;;
esac
envs=${CRUCIBLE_TEST_ENVS:-$default_envs}
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"

run_env() {
  case "$1" in
    debian12) "$root/tools/setup.sh" && ctest --test-dir "$root/build" -j2 --output-on-failure ;;
    debian13) $sudo "$root/tools/ci/trixie.sh" ;;
    debian13-cuda) $sudo "$root/tools/ci/trixie.sh" --cuda ;;
    *) echo "test.sh: unknown environment '$1' (known: debian12, debian13, debian13-cuda)" >&2
       return 2 ;;
  esac
}

status=0
summary=""
for env in $envs; do
  echo "=== $env ==="
  start=$SECONDS
  run_env "$env" 2>&1 | tee "$logs/$env.log"
  rc=${PIPESTATUS[0]}
  took=$((SECONDS - start))
  [ "$rc" -ne 0 ] && status=1
  # CTest's summary runs from its "tests passed" line to the end of its output.
  result=$(sed -n '/tests passed, /,$p' "$logs/$env.log")
  if [ -z "$result" ] && [ "$env" = debian13-cuda ] && [ "$rc" -eq 0 ]; then
    result="built with -Werror; no tests (no GPU, no cuDNN)"
  fi
  [ -z "$result" ] && result="no CTest summary: the set-up or build failed (exit $rc)"
  summary+="=== $env: exit $rc, $((took / 60)) min $((took % 60)) s ===
$result
"
done

echo
echo "$summary"
exit "$status"
