#!/usr/bin/env bash
# Builds the two candidate extensions with the tests' venv python and times them.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
venv=${NDTCU_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/ndtcu/venv}
build=${1:-/tmp/ndtcu-binding-overhead}
cmake -S "$here" -B "$build" -DPython_EXECUTABLE="$venv/bin/python" >/dev/null
cmake --build "$build" -j1 >/dev/null
"$venv/bin/python" "$here/measure.py" "$build"
