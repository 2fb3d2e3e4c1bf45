#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test. Tests that need a GPU or the
# real-data folder (../shared/data, or $NDTCU_DATA_DIR) are reported as skipped without it.
# Then the sanitizer builds (scripts/sanitize.sh: AddressSanitizer and
# UndefinedBehaviorSanitizer over the unit and data tests, ThreadSanitizer over the
# threaded ones; any report fails): about 40 minutes more on 2 cores.
# NDTCU_SANITIZE_TESTS=0 leaves them out.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh"
"$root/scripts/build.sh" "$@"
(cd "${NDTCU_BUILD_DIR:-$root/build}" && ctest --output-on-failure -j "${NDTCU_JOBS:-$(nproc)}")
[[ ${NDTCU_SANITIZE_TESTS:-1} == 1 ]] || exit 0
"$root/scripts/sanitize.sh"
