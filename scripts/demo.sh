#!/usr/bin/env bash
# Installs what is missing, builds what the demo runs (the tool, and the Python package
# that draws the plots), and runs scripts/run_demo.sh on the sample data in data/sample.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh"
build=${NDTCU_BUILD_DIR:-$root/build}
# Only what the demo runs (the target ndtcu_demo: the tool, and the Python package whose
# ndtcu.plot draws the plots), in one build, so that both keep the cores busy.
NDTCU_BUILD_DIR=$build NDTCU_TARGETS=ndtcu_demo "$root/scripts/build.sh" >/dev/null
exec "$root/scripts/run_demo.sh" "$build"
