#!/usr/bin/env python3
"""Writes small bags of PointCloud2 scans with a per-point time field, in each of the
layouts sensors publish, with the rosbags package (writers independent of ndtcu): ROS 1,
ROS 2 sqlite3 and ROS 2 MCAP.

    write_time_bags.py OUT

Each bag holds 3 messages on /points of 240 points (x y z intensity float32, then the time
field), the message stamps 1,700,000,000 s + k x 0.1 s. Point i's time within its sweep is
i x 0.1 / 240 s (0 to 99.6 ms), written as the sensor writes it:

    t            uint32 ns from the stamp    (Ouster)
    offset_time  uint32 ns from the stamp    (Livox)
    time         float32 s from the stamp    (Velodyne)
    time_stamp   float64 s from the stamp    (Autoware)
    timestamp    float64 s, absolute         (Hesai; made relative to the earliest)

and three bags of implausible times: all zero (t), a span of 2.4 s (time), and absolute
float64 stamps stored as float32 (timestamp, 256 s apart at 1.7e9). One bag carries two
candidate fields, `t` (ns) and `rel_ms` (float32 ms), for the override (--point-time).
OUT/manifest.json lists each bag with what a reader must find: the field, the unit, whether
the stamps were absolute, the expected time of every point, or the reason it drops them.

Exits 77 (skipped) when rosbags or numpy cannot be imported.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from write_bags import FLOAT32, FLOAT64, PC2, ROS1, ROS2, UINT32, np  # noqa: E402 (exits 77 without rosbags)
from rosbags.rosbag1 import Writer as Ros1Writer  # noqa: E402
from rosbags.rosbag2 import Writer as Ros2Writer  # noqa: E402
from rosbags.rosbag2.enums import StoragePlugin  # noqa: E402

POINTS = 240
MESSAGES = 3
SWEEP = 0.1
STAMP0_NS = 1_700_000_000 * 10**9
NP_TYPE = {UINT32: "<u4", FLOAT32: "<f4", FLOAT64: "<f8"}

# name, [(field, datatype, value of (relative seconds, stamp in seconds))], expected field,
# unit ("ns", "s", "ms"), absolute, expected relative times (function of relative seconds)
# or the reason the reader drops them.
CASES = [
    ("t", [("t", UINT32, lambda r, s: np.round(r * 1e9))], "t", "ns", False, None),
    ("offset_time", [("offset_time", UINT32, lambda r, s: np.round(r * 1e9))], "offset_time", "ns", False, None),
    ("time", [("time", FLOAT32, lambda r, s: r)], "time", "s", False, None),
    ("time_stamp", [("time_stamp", FLOAT64, lambda r, s: r)], "time_stamp", "s", False, None),
    ("timestamp", [("timestamp", FLOAT64, lambda r, s: s + r)], "timestamp", "s", True, None),
    ("override", [("t", UINT32, lambda r, s: np.round(r * 1e9)), ("rel_ms", FLOAT32, lambda r, s: r * 1e3)],
     "t", "ns", False, None),
    ("zero", [("t", UINT32, lambda r, s: 0.0 * r)], "", "", False, "every point has the same time"),
    ("long", [("time", FLOAT32, lambda r, s: 24.0 * r)], "", "", False, "more than a sweep takes"),
    ("float32_stamps", [("timestamp", FLOAT32, lambda r, s: s + r)], "", "", False, "stored as float32"),
]

FORMATS = ["ros1", "ros2_sqlite3", "ros2_mcap"]


def make_message(store, k, extra):
    """Message k: its points on a ring (1 m high, 10-13 m out) and the time fields `extra`."""
    i = np.arange(POINTS)
    rel = i * (SWEEP / POINTS)
    stamp_ns = STAMP0_NS + k * 100_000_000
    angle = 2.0 * np.pi * i / POINTS
    radius = 10.0 + (i % 4)
    cols = [("x", FLOAT32, radius * np.cos(angle)), ("y", FLOAT32, radius * np.sin(angle)),
            ("z", FLOAT32, 1.0 + 0.0 * i), ("intensity", FLOAT32, 1.0 * (i % 100))]
    cols += [(name, dt, f(rel, stamp_ns / 1e9)) for name, dt, f in extra]
    offsets, step = [], 0
    for _, dt, _ in cols:
        offsets.append(step)
        step += np.dtype(NP_TYPE[dt]).itemsize
    buf = np.zeros((POINTS, step), np.uint8)
    for (name, dt, v), off in zip(cols, offsets):
        a = np.asarray(v).astype(NP_TYPE[dt])
        buf[:, off:off + a.itemsize] = a.view(np.uint8).reshape(POINTS, a.itemsize)
    t = store.types
    sec, nsec = divmod(stamp_ns, 10**9)
    stamp = t["builtin_interfaces/msg/Time"](sec=sec, nanosec=nsec)
    header = (t["std_msgs/msg/Header"](stamp=stamp, frame_id="lidar") if store is ROS2 else
              t["std_msgs/msg/Header"](seq=k, stamp=stamp, frame_id="lidar"))
    fields = [t["sensor_msgs/msg/PointField"](name=n, offset=o, datatype=d, count=1)
              for (n, d, _), o in zip(cols, offsets)]
    msg = t[PC2](header=header, height=1, width=POINTS, fields=fields, is_bigendian=False, point_step=step,
                 row_step=POINTS * step, data=buf.reshape(-1), is_dense=True)
    raw = store.serialize_ros1(msg, PC2) if store is ROS1 else store.serialize_cdr(msg, PC2)
    return stamp_ns, bytes(raw), rel


def write(bag, fmt, extra):
    store = ROS1 if fmt == "ros1" else ROS2
    messages = [make_message(store, k, extra) for k in range(MESSAGES)]
    if fmt == "ros1":
        with Ros1Writer(bag) as w:
            conn = w.add_connection("/points", PC2, typestore=ROS1)
            for stamp, raw, _ in messages:
                w.write(conn, stamp, raw)
    else:
        plugin = StoragePlugin.MCAP if fmt == "ros2_mcap" else StoragePlugin.SQLITE3
        with Ros2Writer(bag, version=9, storage_plugin=plugin) as w:
            conn = w.add_connection("/points", PC2, typestore=ROS2)
            for stamp, raw, _ in messages:
                w.write(conn, stamp, raw)
    return messages[0][2]


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: write_time_bags.py OUT")
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    manifest = {"messages": MESSAGES, "points": POINTS, "bags": []}
    for name, extra, field, unit, absolute, dropped in CASES:
        for fmt in FORMATS:
            bag = os.path.join(out, f"time_{name}_{fmt}" + (".bag" if fmt == "ros1" else ""))
            if os.path.exists(bag):
                sys.exit(f"write_time_bags.py: {bag} exists")
            rel = write(bag, fmt, extra)
            # The times a reader must give: what the field holds, in seconds from the stamp
            # (the float32 and uint32 roundings included), relative to the earliest when
            # the stamps are absolute.
            f = extra[0]
            held = np.asarray(f[2](rel, 0.0)).astype(NP_TYPE[f[1]]).astype(np.float64)
            expected = held * {"ns": 1e-9, "s": 1.0, "ms": 1e-3}.get(unit, 0.0)
            entry = {"path": bag, "name": name, "format": fmt, "field": field, "unit": unit, "absolute": absolute,
                     "dropped": dropped or "", "times": [] if dropped else [float(x) for x in expected],
                     "fields": [n for n, _, _ in extra]}
            manifest["bags"].append(entry)
            print(f"wrote {bag}")
    with open(os.path.join(out, "manifest.json"), "w") as fh:
        json.dump(manifest, fh, indent=1)


if __name__ == "__main__":
    main()
