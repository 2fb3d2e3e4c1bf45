#!/usr/bin/env python3
"""Writes the bag fuzzers' seed corpus (tests/fuzz/corpus/{mcap,ros1bag}): tiny bags of two
3-point clouds in every container, compression and point layout the reader takes (and
two nav_msgs/Odometry messages beside them), written
by the rosbags and mcap packages (tests/rosbag/write_bags.py). Run with the interpreter
scripts/setup.sh installs:
    ~/.cache/ndtcu/venv/bin/python tests/fuzz/make_bag_seeds.py
"""
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "rosbag"))
import numpy as np  # noqa: E402
import write_bags  # noqa: E402

clouds = [([np.array([1.0, 2.5, -3.0], np.float32) + k, np.array([0.5, -1.0, 4.0], np.float32),
            np.array([0.0, 0.25, 8.0], np.float32)], np.array([1, 2, 3], np.float32)) for k in range(2)]
times = [1_000_000_000, 1_100_000_000]
out = {"mcap": os.path.join(HERE, "corpus", "mcap"), "ros1bag": os.path.join(HERE, "corpus", "ros1bag")}
for d in out.values():
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
with tempfile.TemporaryDirectory() as tmp:
    for fmt, compression, layout in [("ros2_mcap", "none", "bigendian"), ("ros2_mcap", "zstd", "organized_nan"),
                                     ("ros2_mcap", "lz4", "float32"), ("ros2_mcap", "none", "float64_padded"),
                                     ("ros1", "none", "float32"), ("ros1", "bz2", "float64_padded"),
                                     ("ros1", "lz4", "organized_nan")]:
        name = f"{compression}_{layout}"
        if fmt == "ros1":
            bag = os.path.join(out["ros1bag"], name + ".bag")
            write_bags.write_bag(bag, fmt, compression, layout, clouds, times)
        elif compression == "lz4":
            write_bags.write_bag(os.path.join(out["mcap"], name + ".mcap"), fmt, compression, layout, clouds, times)
        else:
            folder = os.path.join(tmp, name)
            write_bags.write_bag(folder, fmt, compression, layout, clouds, times)
            shutil.copy(os.path.join(folder, name + ".mcap"), os.path.join(out["mcap"], name + ".mcap"))
    # Odometry beside the clouds (nav_msgs/Odometry on /odom): ROS 1, and ROS 2 MCAP in
    # big-endian CDR.
    odom = [[1.0, 2.0, 3.0, 0.0, 0.0, 0.0, 1.0], [1.5, 2.0, 3.0, 0.0, 0.0, 0.0998334, 0.9950042]]
    write_bags.write_odometry_bag(os.path.join(out["ros1bag"], "odometry.bag"), "ros1", clouds, times, odom)
    folder = os.path.join(tmp, "odometry")
    write_bags.write_odometry_bag(folder, "ros2_mcap", clouds, times, odom, big_endian=True)
    shutil.copy(os.path.join(folder, "odometry.mcap"), os.path.join(out["mcap"], "odometry.mcap"))
    # Broken ones: cut in the middle.
    for kind, ext in (("mcap", ".mcap"), ("ros1bag", ".bag")):
        src = os.path.join(out[kind], sorted(os.listdir(out[kind]))[0])
        data = open(src, "rb").read()
        open(os.path.join(out[kind], "truncated" + ext), "wb").write(data[:len(data) // 2])
for kind, d in out.items():
    print(kind, sorted((f, os.path.getsize(os.path.join(d, f))) for f in os.listdir(d)))
