#!/bin/sh
# Runs one file of the ROS 2 node's tests (pytest, real DDS on localhost) with PYTHON and the
# built package on PYTHONPATH, in ROS domain DOMAIN (each CTest entry its own, so that
# parallel runs do not hear each other); exits 77 (skipped) when PYTHON, its pytest or rclpy
# (the ROS 2 wheels scripts/setup.sh installs) is missing, or when NEEDS (a path, "-" for
# none) does not exist.
#   run_ros2_tests.sh PYTHON PACKAGE_DIR CLI BAG_DIR DOMAIN TEST_FILE WORK NEEDS [pytest args...]
python=$1 package_dir=$2 cli=$3 bags=$4 domain=$5 test_file=$6 work=$7 needs=$8
shift 8
[ -x "$python" ] || { echo "no $python: run scripts/setup.sh" >&2; exit 77; }
"$python" -c "import pytest, numpy, yaml" 2>/dev/null || { echo "$python has no pytest/numpy/yaml: run scripts/setup.sh" >&2; exit 77; }
"$python" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('rclpy') is None)" ||
  { echo "$python has no rclpy (the ROS 2 wheels): run scripts/setup.sh" >&2; exit 77; }
[ "$needs" = - ] || [ -e "$needs" ] || { echo "no $needs" >&2; exit 77; }
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work" || exit 1
# Discovery stays on this machine; the middleware is the wheels' Fast DDS (ndtcu.ros2's
# environment sets the rest: the wheels' library folders).
PYTHONPATH="$package_dir${PYTHONPATH:+:$PYTHONPATH}" NDTCU_CLI="$cli" NDTCU_BAG_DIR="$bags" \
  ROS_DOMAIN_ID="$domain" ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST \
  RMW_IMPLEMENTATION=rmw_fastrtps_cpp \
  exec "$python" -m pytest -q -p no:cacheprovider -W ignore::DeprecationWarning --basetemp="$work" \
  "$here/$test_file" "$@"
