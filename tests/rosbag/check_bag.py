#!/usr/bin/env python3
"""Reads a ROS 2 bag with the rosbags package (a reader independent of ndtcu) and checks it
against the scans it was written from: one sensor_msgs/msg/PointCloud2 message per scan on
/points, recorded and stamped at the scan's time (poses_tum.txt), with the PCD's x y z
(and intensity) bit for bit.

    check_bag.py BAG SCANS_DIR POSES_TUM
    check_bag.py --imu BAG IMU_CSV

The second form checks the bag's sensor_msgs/msg/Imu messages on /imu against the samples
of `ndtcu simulate`'s imu.csv: one message per line, recorded and stamped at its time, its
angular velocity and linear acceleration bit for bit.

Exits 77 (skipped) when rosbags or numpy cannot be imported.
"""
import os
import sys

try:
    import numpy as np
    from rosbags.rosbag2 import Reader
    from rosbags.typesys import Stores, get_typestore
except ImportError as e:
    print(f"check_bag.py: {e}; run scripts/setup.sh", file=sys.stderr)
    sys.exit(77)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from write_bags import read_pcd  # noqa: E402

store = get_typestore(Stores.ROS2_HUMBLE)


def check_imu(bag, imu_csv):
    rows = [line.strip().split(",") for line in open(imu_csv) if line.strip() and not line.startswith("#")]
    assert rows[0] == ["time", "wx", "wy", "wz", "ax", "ay", "az"], rows[0]
    rows = rows[1:]
    with Reader(bag) as reader:
        conns = [c for c in reader.connections if c.topic == "/imu"]
        assert len(conns) == 1 and conns[0].msgtype == "sensor_msgs/msg/Imu", [(c.topic, c.msgtype) for c in reader.connections]
        msgs = list(reader.messages(connections=conns))
        assert len(msgs) == len(rows), (len(msgs), len(rows))
        for k, ((conn, t, raw), row) in enumerate(zip(msgs, rows)):
            m = store.deserialize_cdr(raw, conn.msgtype)
            # The CSV's times have 9 decimals: whole nanoseconds.
            ns = int(row[0].replace(".", ""))
            stamp = m.header.stamp.sec * 10**9 + m.header.stamp.nanosec
            assert t == ns and stamp == ns, f"sample {k}: recorded at {t} ns, stamped {stamp} ns, expected {ns}"
            got = [m.angular_velocity.x, m.angular_velocity.y, m.angular_velocity.z,
                   m.linear_acceleration.x, m.linear_acceleration.y, m.linear_acceleration.z]
            assert got == [float(v) for v in row[1:]], f"sample {k}: {got} != {row[1:]}"
    print(f"{bag}: {len(msgs)} sensor_msgs/msg/Imu messages read by rosbags match {imu_csv}")


if sys.argv[1] == "--imu":
    check_imu(sys.argv[2], sys.argv[3])
    sys.exit(0)
bag, scans_dir, poses = sys.argv[1:4]
scans = sorted(os.path.join(scans_dir, f) for f in os.listdir(scans_dir) if f.endswith(".pcd"))
times = [int(round(float(line.split()[0]) * 1e9)) for line in open(poses) if line.strip() and not line.startswith("#")]
DTYPES = {7: "f4", 8: "f8"}
with Reader(bag) as reader:
    conns = [c for c in reader.connections if c.topic == "/points"]
    assert len(conns) == 1 and conns[0].msgtype == "sensor_msgs/msg/PointCloud2", [(c.topic, c.msgtype) for c in reader.connections]
    msgs = list(reader.messages(connections=conns))
    assert len(msgs) == len(scans) == len(times), (len(msgs), len(scans), len(times))
    for k, ((conn, t, raw), scan) in enumerate(zip(msgs, scans)):
        m = store.deserialize_cdr(raw, conn.msgtype)
        assert t == times[k], f"message {k}: recorded at {t} ns, expected {times[k]}"
        stamp = m.header.stamp.sec * 10**9 + m.header.stamp.nanosec
        assert stamp == times[k], f"message {k}: stamp {stamp} ns, expected {times[k]}"
        n = m.width * m.height
        data = np.asarray(m.data, dtype=np.uint8).reshape(n, m.point_step)
        (x, y, z), intensity = read_pcd(scan)
        expect = {"x": x, "y": y, "z": z, "intensity": intensity}
        assert {f.name for f in m.fields} >= {"x", "y", "z"}
        for f in m.fields:
            dt = np.dtype(DTYPES[f.datatype]).newbyteorder(">" if m.is_bigendian else "<")
            got = data[:, f.offset:f.offset + dt.itemsize].copy().view(dt).reshape(-1)
            ref = expect[f.name]
            assert got.shape == ref.shape and got.tobytes() == ref.astype(dt).tobytes(), f"message {k}: field {f.name} differs"
        print(f"message {k}: {n} points at {t} ns match {os.path.basename(scan)}")
print(f"{bag}: {len(msgs)} messages read by rosbags match the scans")
