#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test. Tests that need a GPU or the
# real-data folder (../shared/data, or $NDTCU_DATA_DIR) are reported as skipped without it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh"
"$root/scripts/build.sh" "$@"
cd "${NDTCU_BUILD_DIR:-$root/build}"
ctest --output-on-failure -j "${NDTCU_JOBS:-$(nproc)}"
