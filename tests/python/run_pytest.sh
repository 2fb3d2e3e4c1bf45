#!/bin/sh
# Runs the Python module's pytest suite with PYTHON (the interpreter the module was built
# for) and the built package on PYTHONPATH; exits 77 (skipped) when PYTHON or its pytest is
# missing.
#   run_pytest.sh PYTHON PACKAGE_DIR CLI [pytest args...]
python=$1 package_dir=$2 cli=$3
shift 3
[ -x "$python" ] || { echo "no $python: run scripts/setup.sh" >&2; exit 77; }
"$python" -c "import pytest, numpy" 2>/dev/null || { echo "$python has no pytest/numpy: run scripts/setup.sh" >&2; exit 77; }
here=$(cd "$(dirname "$0")" && pwd)
PYTHONPATH="$package_dir${PYTHONPATH:+:$PYTHONPATH}" NDTCU_CLI="$cli" \
  exec "$python" -m pytest -q -p no:cacheprovider "$here" "$@"
