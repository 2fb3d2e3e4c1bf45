#!/bin/sh
# Writes test bags with write_bags.py into a fresh OUT; exits 77 (skipped) when PYTHON (the
# venv of scripts/setup.sh) or the scans are missing.
#   run_write_bags.sh PYTHON OUT SCANS TIMES [--prefix NAME] [--odometry POSES_TUM] [--only BAG ...]
# Several --only values write several bags into OUT.
python=$1 out=$2 scans=$3 times=$4
shift 4
[ -x "$python" ] || { echo "no $python: run scripts/setup.sh" >&2; exit 77; }
[ -e "$scans" ] || { echo "no $scans" >&2; exit 77; }
here=$(dirname "$0")
rm -rf "$out"
prefix=
if [ "$1" = --prefix ]; then prefix="--prefix $2"; shift 2; fi
if [ "$1" = --odometry ]; then prefix="$prefix --odometry $2"; shift 2; fi
if [ $# -eq 0 ]; then
  exec "$python" "$here/write_bags.py" "$out" --scans "$scans" --times "$times" $prefix
fi
while [ "$1" = --only ]; do
  "$python" "$here/write_bags.py" "$out" --scans "$scans" --times "$times" $prefix --only "$2" || exit $?
  shift 2
done
