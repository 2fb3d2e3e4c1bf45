#!/usr/bin/env bash
# Installs what is missing, builds ndtcu, and runs it on the sample data in data/sample:
# describes the map and a scan, then aligns the scan to the map from a guess 1 m and 3 deg
# off its true pose and compares the result with the truth; finally localizes the whole
# sequence in the map and evaluates it against the true poses (summary and plots), and
# once more from a ROS 2 bag of the same scans, written by the simulator.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh"
build=${NDTCU_BUILD_DIR:-$root/build}
NDTCU_BUILD_DIR=$build "$root/scripts/build.sh" >/dev/null
ndtcu=$build/apps/ndtcu
sample=$root/data/sample
if [[ ! -f $sample/map.pcd ]]; then
  echo "demo.sh: $sample/map.pcd is missing; regenerate it with scripts/make_sample.sh" >&2
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
out=$build/demo_localize
echo
echo "== ndtcu localize: the 10 sample scans in the map, evaluated against the true poses"
"$ndtcu" localize --map "$sample/map.pcd" --scans "$sample/scans" --reference "$sample/poses_tum.txt" \
  --init-from "$sample/poses_tum.txt" --out "$out"
echo "   summary: $out/summary.json; per-frame records: $out/frames.csv"

# The same sequence as a rosbag: the simulator makes the sample again (same seed and
# options as scripts/make_sample.sh) and writes its scans as a ROS 2 bag (MCAP), which
# localizes to the same trajectory.
sim=$build/demo_sample_sim bag=$build/demo_sample_bag bag_out=$build/demo_localize_bag
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
  echo "demo.sh: the bag's trajectory differs from the folder's" >&2
  exit 1
fi
