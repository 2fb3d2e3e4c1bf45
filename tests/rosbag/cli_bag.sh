#!/bin/sh
# The command line on bags written by tests/rosbag/write_bags.py:
#   ndtcu info BAG (text and JSON); ndtcu localize --scans BAG gives the trajectory that
#   --scans FOLDER gives (same bytes), for a ROS 2 MCAP (zstd chunks, organized cloud with
#   NaN points), a ROS 1 (bz2, float64 x y z) and a ROS 2 sqlite3 bag; --topic errors.
#   cli_bag.sh NDTCU BAG_DIR SAMPLE_DIR WORK
# Exits 77 (skipped) when the bags were not written (no rosbags venv).
exe=$1 bags=$2 sample=$3 work=$4
[ -f "$bags/manifest.json" ] || { echo "no bags in $bags (run scripts/setup.sh)" >&2; exit 77; }
rm -rf "$work" && mkdir -p "$work" || exit 1
fail() { echo "FAILED: $*" >&2; exit 1; }
expect() {  # expect RC REGEX -- ARGS...: exit code and an extended regex over stdout+stderr
  rc=$1 re=$2
  shift 3
  out=$("$exe" "$@" 2>&1)
  got=$?
  [ "$got" = "$rc" ] || fail "ndtcu $*: exit code $got, expected $rc; output:
$out"
  printf '%s\n' "$out" | tr '\n' ' ' | grep -Eq -- "$re" || fail "ndtcu $*: output does not match '$re':
$out"
  echo "ok: ndtcu $*"
}
expect 0 "compression lz4 \([0-9]+ chunks?\).*/notes +std_msgs/String +10 +ros1 +/points +sensor_msgs/PointCloud2 +10 +ros1" -- \
  info "$bags/sample_ros1_lz4.bag"
expect 0 '"compression": "zstd \(per message\)",.*"format": "ros2_sqlite3",.*"messages": 10, +"name": "/points", +"point_cloud2": true' -- \
  --json info "$bags/sample_sqlite3_zstd"
common="--map $sample/map.pcd --reference $sample/poses_tum.txt --init-from $sample/poses_tum.txt --threads 2 --backend cpu --no-plot"
expect 0 "10 localized, 0 recovered, 0 lost, 0 degenerate, 0 uncertain, 0 skipped of 10" -- localize --scans "$sample/scans" $common --out "$work/folder"
for bag in sample_mcap_zstd sample_ros1_bz2.bag sample_sqlite3; do
  expect 0 "10 localized, 0 recovered, 0 lost, 0 degenerate, 0 uncertain, 0 skipped of 10" -- localize --scans "$bags/$bag" $common --out "$work/$bag"
  cmp "$work/folder/trajectory_tum.txt" "$work/$bag/trajectory_tum.txt" ||
    fail "$bag: trajectory differs from the folder's"
  echo "ok: $bag gives the folder's trajectory ($(wc -l < "$work/$bag/trajectory_tum.txt") poses)"
done
expect 0 '"topic": "/points"' -- --json localize --scans "$bags/sample_mcap" --topic /points $common --out "$work/topic"
expect 1 "^ndtcu: error: [^ ]*sample_two_clouds.bag: 2 PointCloud2 topics, choose one with --topic: /points \(2 messages\), /points_copy \(2 messages\) $" -- \
  localize --scans "$bags/sample_two_clouds.bag" $common --out "$work/two"
expect 1 "^ndtcu: error: [^ ]*sample_mcap: topic /notes holds std_msgs/msg/String, not sensor_msgs/PointCloud2 $" -- \
  localize --scans "$bags/sample_mcap" --topic /notes $common --out "$work/notes"
expect 1 "^ndtcu: error: --topic /points: [^ ]*scans is not a rosbag" -- \
  localize --scans "$sample/scans" --topic /points $common --out "$work/folder_topic"
# Odometry from the bag (nav_msgs/Odometry on /odom; ROS 1, and ROS 2 MCAP in big-endian CDR)
# predicts as the same poses from a TUM file do.
for bag in sample_odometry.bag sample_odometry_mcap; do
  expect 0 "10 localized, 0 recovered, 0 lost.*odometry +9 frames predicted from [^ ]*$bag topic /odom, 0 outside it" -- \
    localize --scans "$bags/$bag" --odometry-topic /odom $common --out "$work/odom_$bag"
done
cmp "$work/odom_sample_odometry.bag/trajectory_tum.txt" "$work/odom_sample_odometry_mcap/trajectory_tum.txt" ||
  fail "the ROS 1 and ROS 2 odometry bags gave different trajectories"
expect 0 "odometry +9 frames predicted from [^ ]*sample_odometry_tum.txt, 0 outside it" -- \
  localize --scans "$sample/scans" --odometry "$bags/sample_odometry_tum.txt" $common --out "$work/odom_file"
# The TUM file holds the poses to 9 decimals: the two trajectories agree to 1e-9 before
# they are written to 6, so to one unit of their last written digit.
paste "$work/odom_file/trajectory_tum.txt" "$work/odom_sample_odometry.bag/trajectory_tum.txt" | awk '
  { for (i = 2; i <= 8; i++) { d = $i - $(i + 8); if (d < 0) d = -d; if (d > worst) worst = d } }
  END { if (NR != 10 || worst > 1.5e-6) { print "odometry file and topic differ: " NR " lines, " worst; exit 1 } }' ||
  fail "--odometry FILE and --odometry-topic gave different trajectories"
echo "ok: --odometry-topic gives --odometry FILE's trajectory"
expect 1 "^ndtcu: error: --odometry-topic /points: [^ ]*sample_odometry.bag: the topic holds sensor_msgs/PointCloud2, not nav_msgs/Odometry $" -- \
  localize --scans "$bags/sample_odometry.bag" --odometry-topic /points $common --out "$work/odom_points"
expect 1 "no topic '/odometry' in the bag; its topics: /odom \(nav_msgs/Odometry\), /points" -- \
  localize --scans "$bags/sample_odometry.bag" --odometry-topic /odometry $common --out "$work/odom_missing"
expect 1 "^ndtcu: error: --odometry-topic /odom: [^ ]*scans is not a rosbag" -- \
  localize --scans "$sample/scans" --odometry-topic /odom $common --out "$work/odom_folder"
