#!/bin/sh
# ndtcu simulate --rosbag: the bag lists 3 PointCloud2 messages (ndtcu info), gives the
# trajectory of the scan folder (ndtcu localize), and reads back with the rosbags package
# (check_bag.py), bit for bit against the scans.
#   simulate_bag.sh NDTCU PYTHON WORK
# Exits 77 (skipped) after the ndtcu checks when PYTHON (scripts/setup.sh's venv) is missing.
exe=$1 python=$2 work=$3
here=$(dirname "$0")
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
set -e
"$exe" simulate --out sim --world-size 60 --frames 3 --columns 90 --map-voxel 0.5 --rosbag sim_bag
"$exe" info sim_bag | tr '\n' ' ' | grep -Eq "ros2_mcap.*/points +sensor_msgs/msg/PointCloud2 +3 +cdr"
common="--map sim/map.pcd --reference sim/poses_tum.txt --init-from sim/poses_tum.txt --threads 2 --backend cpu --no-plot -q"
"$exe" localize --scans sim/scans $common --out from_folder
"$exe" localize --scans sim_bag $common --out from_bag
cmp from_folder/trajectory_tum.txt from_bag/trajectory_tum.txt
echo "ok: info and localize ($(wc -l < from_bag/trajectory_tum.txt) poses, same as the folder's)"
# Refused: writing into a folder that holds files.
if "$exe" simulate --out sim --world-size 60 --frames 3 --columns 90 --map-voxel 0.5 --rosbag sim_bag 2>err.txt; then
  echo "FAILED: an existing bag folder was overwritten" >&2; exit 1
fi
grep -q "sim_bag: exists and is not an empty folder" err.txt
# The IMU: imu.csv beside the scans and /imu in the bag; --deskew imu from the CSV and from
# the bag's topic gives the same poses, every frame's rotation from the IMU.
"$exe" simulate --out fast --scenario fast --sweep-time 0.1 --world-size 100 --frames 4 --columns 360 \
  --map-voxel 0.5 --rosbag fast_bag
"$exe" info fast_bag | tr '\n' ' ' | grep -Eq "/imu +sensor_msgs/msg/Imu +81 +cdr"
[ "$(wc -l < fast/imu.csv)" -eq 82 ]  # the header and 0 to 0.4 s at 200 Hz
imu_common="--map fast/map.pcd --init-from fast/poses_tum.txt --threads 2 --backend cpu --no-plot -q --deskew imu"
"$exe" localize --scans fast/scans $imu_common --imu fast/imu.csv --out imu_csv
"$exe" localize --scans fast_bag $imu_common --imu-topic /imu --out imu_bag
cmp imu_csv/trajectory_tum.txt imu_bag/trajectory_tum.txt
[ "$(grep -c ',imu,covered,[0-9]*$' imu_csv/frames.csv)" -eq 4 ]
[ "$(grep -c ',imu,covered,[0-9]*$' imu_bag/frames.csv)" -eq 4 ]
echo "ok: --deskew imu from imu.csv and from the bag's /imu ($(wc -l < imu_bag/trajectory_tum.txt) poses, the same)"
[ -x "$python" ] || { echo "no $python: the rosbags check is skipped (run scripts/setup.sh)" >&2; exit 77; }
"$python" "$here/check_bag.py" sim_bag sim/scans sim/poses_tum.txt
"$python" "$here/check_bag.py" --imu fast_bag fast/imu.csv
