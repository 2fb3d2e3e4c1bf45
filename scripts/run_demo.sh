#!/usr/bin/env bash
# The demo's runs on a built tree (scripts/demo.sh builds it first): describes the sample
# map and a scan, aligns the scan to the map from a guess 1 m and 3 deg off its true pose
# and compares the result with the truth, localizes the whole sequence in the map and
# evaluates it against the true poses (summary and plots), and once more from a ROS 2 bag
# of the same scans, written by the simulator. Outputs go to OUT/demo_* (OUT: BUILD).
#   run_demo.sh BUILD [OUT]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:?usage: run_demo.sh BUILD [OUT]}" && pwd)
outputs=${2:-$build}
mkdir -p "$outputs"
ndtcu=$build/apps/ndtcu
# The plots: `ndtcu localize` runs `python3 -m ndtcu.plot` with the first Python that
# imports matplotlib and ndtcu.plot. The package is the build tree's (not installed), and
# the Python it was built for (setup.sh's venv, which has matplotlib) comes first: with
# neither, a fresh machine's python3 lacked matplotlib and /usr/bin/python3 the package.
plots=0
if [[ -f $build/python/ndtcu/plot.py ]] && ls "$build"/python/ndtcu/_ndtcu*.so >/dev/null 2>&1; then
  plots=1
  export PYTHONPATH=$build/python${PYTHONPATH:+:$PYTHONPATH}
  python=$(sed -n 's/^Python_EXECUTABLE:[A-Z]*=//p' "$build/CMakeCache.txt")
  if [[ -x $(dirname "$python")/python3 ]]; then export PATH=$(dirname "$python"):$PATH; fi
fi
sample=$root/data/sample
if [[ ! -f $sample/map.pcd ]]; then
  echo "run_demo.sh: $sample/map.pcd is missing; regenerate it with scripts/make_sample.sh" >&2
  exit 1
fi
scan=$sample/scans/000003.pcd

echo "== ndtcu info: the sample map and one scan"
"$ndtcu" info "$sample/map.pcd" "$scan"

# The scan's true pose (line 4 of poses_tum.txt) as x,y,z,roll,pitch,yaw, and a guess
# 0.8 m, -0.6 m, 0.1 m and 3 degrees of yaw away from it.
read -r truth guess < <(python3 - "$sample/poses_tum.txt" <<'PY'
import math, sys
t, x, y, z, qx, qy, qz, qw = map(float, open(sys.argv[1]).read().splitlines()[3].split())
# R = Rx(roll) Ry(pitch) Rz(yaw), the convention ndtcu's --init uses
r02 = 2 * (qx * qz + qw * qy)
r12 = 2 * (qy * qz - qw * qx); r22 = 1 - 2 * (qx * qx + qy * qy)
r01 = 2 * (qx * qy - qw * qz); r00 = 1 - 2 * (qy * qy + qz * qz)
roll, pitch, yaw = math.atan2(-r12, r22), math.asin(max(-1, min(1, r02))), math.atan2(-r01, r00)
fmt = lambda v: ",".join(f"{a:.6f}" for a in v)
print(fmt([x, y, z, roll, pitch, yaw]), fmt([x + 0.8, y - 0.6, z + 0.1, roll, pitch, yaw + math.radians(3)]))
PY
)
echo
echo "== ndtcu align: scan 3 to the map (Autoware settings), from a guess 1 m and 3 deg off"
echo "   truth x,y,z,roll,pitch,yaw = $truth"
"$ndtcu" align "$sample/map.pcd" "$scan" --source-voxel 0.5 --init="$guess"

# Localize the whole sequence in the map, starting from the first true pose, and evaluate
# against the truth; the plots land next to the trajectory.
out=$outputs/demo_localize
echo
echo "== ndtcu localize: the 10 sample scans in the map, evaluated against the true poses"
"$ndtcu" localize --map "$sample/map.pcd" --scans "$sample/scans" --reference "$sample/poses_tum.txt" \
  --init-from "$sample/poses_tum.txt" --out "$out"
echo "   summary: $out/summary.json; per-frame records: $out/frames.csv"
if [[ $plots == 1 && ! -f $out/trajectory.png ]]; then
  echo "run_demo.sh: the Python package is built, but no plot was drawn (the lines above say why)" >&2
  exit 1
fi

# The same sequence as a rosbag: the simulator makes the sample again (same seed and
# options as scripts/make_sample.sh) and writes its scans as a ROS 2 bag (MCAP), which
# localizes to the same trajectory.
sim=$outputs/demo_sample_sim bag=$outputs/demo_sample_bag bag_out=$outputs/demo_localize_bag
rm -rf "$sim" "$bag" "$bag_out"
echo
echo "== ndtcu simulate --rosbag: the sample sequence written as a ROS 2 bag"
"$ndtcu" -q simulate --out "$sim" --seed 17 --world-size 80 --sensor hdl32 --columns 300 --frames 10 \
  --map-voxel 0.25 --encoding binary_compressed --rosbag "$bag" >/dev/null
"$ndtcu" info "$bag"
echo
echo "== ndtcu localize --scans BAG: the bag's PointCloud2 messages in the map"
"$ndtcu" localize --map "$sample/map.pcd" --scans "$bag" --topic /points --reference "$sample/poses_tum.txt" \
  --init-from "$sample/poses_tum.txt" --out "$bag_out" --no-plot
if cmp -s "$out/trajectory_tum.txt" "$bag_out/trajectory_tum.txt"; then
  echo "   the bag gives the scan folder's trajectory, byte for byte"
else
  echo "run_demo.sh: the bag's trajectory differs from the folder's" >&2
  exit 1
fi
