#!/usr/bin/env bash
# Installs what is missing, builds ndtcu, and runs it on the sample data in data/.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh"
NDTCU_BUILD_DIR=${NDTCU_BUILD_DIR:-$root/build} "$root/scripts/build.sh" >/dev/null
ndtcu=${NDTCU_BUILD_DIR:-$root/build}/apps/ndtcu
sample=$root/data/sample
if [[ ! -f $sample/map.pcd ]]; then
  echo "demo.sh: $sample/map.pcd is missing; regenerate it with scripts/make_sample.sh" >&2
  exit 1
fi
echo "== ndtcu info on the sample map and its first scan"
"$ndtcu" info "$sample/map.pcd" "$(ls "$sample"/scans/*.pcd | head -n 1)"
