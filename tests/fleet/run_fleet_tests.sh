#!/bin/sh
# Runs the fleet runner's tests (ndtcu.fleet on a local Ray cluster of 2 CPUs, and on two
# nodes of one machine) with PYTHON and the built package on PYTHONPATH; exits 77 (skipped)
# when PYTHON, its pytest or its ray is missing (scripts/setup.sh installs them).
#   run_fleet_tests.sh PYTHON PACKAGE_DIR CLI BAG_DIR [pytest args...]
python=$1 package_dir=$2 cli=$3 bags=$4
shift 4
[ -x "$python" ] || { echo "no $python: run scripts/setup.sh" >&2; exit 77; }
"$python" -c "import pytest, yaml, ray" 2>/dev/null || { echo "$python has no pytest/yaml/ray: run scripts/setup.sh" >&2; exit 77; }
here=$(cd "$(dirname "$0")" && pwd)
# Ray offline and quiet: no usage report, no dashboard (ray.init(include_dashboard=False)).
PYTHONPATH="$package_dir${PYTHONPATH:+:$PYTHONPATH}" NDTCU_CLI="$cli" NDTCU_BAG_DIR="$bags" \
  RAY_USAGE_STATS_ENABLED=0 RAY_DISABLE_DOCKER_CPU_WARNING=1 \
  exec "$python" -m pytest -q -p no:cacheprovider "$here" "$@"
