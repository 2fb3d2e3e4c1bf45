#!/bin/sh
# Writes the per-point time bags with write_time_bags.py into a fresh OUT; exits 77
# (skipped) when PYTHON (the venv of scripts/setup.sh) is missing.
#   run_write_time_bags.sh PYTHON OUT
python=$1 out=$2
[ -x "$python" ] || { echo "no $python: run scripts/setup.sh" >&2; exit 77; }
rm -rf "$out"
exec "$python" "$(dirname "$0")/write_time_bags.py" "$out"
