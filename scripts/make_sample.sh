#!/usr/bin/env bash
# Regenerates data/sample/: a synthetic 80 m city block (one block and its streets), its
# map, ten HDL-32 scans along a drive and their true poses, all made by `ndtcu simulate`.
# Builds ndtcu first when needed. The options are fixed, so the same build writes the same
# bytes every time (another compiler or libm may differ in the last bits of some values).
#
#   scripts/make_sample.sh              writes data/sample/
#   NDTCU_BUILD_DIR=... scripts/...     uses another build folder
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${NDTCU_BUILD_DIR:-$root/build}
if [[ -f $build/CMakeCache.txt ]]; then
  cmake --build "$build" --target ndtcu_cli -j "${NDTCU_JOBS:-$(nproc)}" >/dev/null
else
  NDTCU_BUILD_DIR=$build "$root/scripts/build.sh" >/dev/null
fi
# Seed 17 gives a block with two buildings, trees and parked cars. 300 columns (1.2 deg)
# instead of the HDL-32E's 2250 and a 0.25 m map voxel keep the folder near 3 MB.
"$build/apps/ndtcu" simulate --out "$root/data/sample" --seed 17 --world-size 80 --sensor hdl32 --columns 300 \
  --frames 10 --map-voxel 0.25 --encoding binary_compressed
