#!/usr/bin/env bash
# Configures and builds ndtcu into build/ (or $NDTCU_BUILD_DIR). Extra arguments go to
# the CMake configure step, e.g. scripts/build.sh -DNDTCU_WITH_CUDA=OFF
# NDTCU_TARGETS="ndtcu_cli ndtcu_python" builds those targets only (default: everything,
# the tests included).
# Compiles through ccache when it is installed (scripts/ccache.sh; NDTCU_CCACHE=0: not).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${NDTCU_BUILD_DIR:-$root/build}
jobs=${NDTCU_JOBS:-$(nproc)}
source "$root/scripts/ccache.sh"
mkdir -p "$build"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=${CMAKE_BUILD_TYPE:-Release} "${ccache_flags[@]}" "$@" >"$build/configure.log" 2>&1 || {
  cat "$build/configure.log" >&2
  echo "build.sh: configure failed (log above)" >&2
  exit 1
}
targets=()
for t in ${NDTCU_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$build" -j "$jobs" "${targets[@]}"
