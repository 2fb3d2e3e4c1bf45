#!/usr/bin/env python3
"""Writes rosbags of PCD scans with writers independent of ndtcu: the `rosbags` package
(ROS 2 sqlite3 and MCAP, ROS 1) and Foxglove's `mcap` package (MCAP with lz4 chunks). The big-endian layout
is also serialized as big-endian CDR.

    write_bags.py OUT --scans DIR_OR_LIST --times POSES_TUM [--prefix NAME] [--only FORMAT]

Scan k is message k, recorded and stamped at time k of POSES_TUM (its first column, in
seconds; with a list of `path time` lines, at the line's time), to the nanosecond. Each
bag stores the points in another PointCloud2 layout (float32 or float64 x y z, padding,
big-endian data, an organized cloud with NaN points and row padding), and OUT/manifest.json
(merged with an existing one) describes each bag for the tests: its path, topic, layout,
and the PCD files in message order.

Exits 77 (skipped) when rosbags, numpy or mcap cannot be imported.
"""
import argparse
import decimal
import json
import math
import os
import struct
import sys

try:
    import numpy as np
    from mcap.writer import CompressionType, Writer as McapWriter
    from rosbags.rosbag1 import Writer as Ros1Writer
    from rosbags.rosbag2 import Writer as Ros2Writer
    from rosbags.rosbag2.enums import CompressionFormat, CompressionMode, StoragePlugin
    from rosbags.typesys import Stores, get_typestore
except ImportError as e:  # the venv of scripts/setup.sh is not there
    print(f"write_bags.py: {e}; run scripts/setup.sh", file=sys.stderr)
    sys.exit(77)

ROS2 = get_typestore(Stores.ROS2_HUMBLE)
ROS1 = get_typestore(Stores.ROS1_NOETIC)
PC2 = "sensor_msgs/msg/PointCloud2"
NAN = float("nan")


def lzf_decompress(data, size):
    out = bytearray()
    i = 0
    while i < len(data):
        ctrl = data[i]
        i += 1
        if ctrl < 32:
            out += data[i:i + ctrl + 1]
            i += ctrl + 1
            continue
        n = ctrl >> 5
        ref = len(out) - ((ctrl & 0x1F) << 8) - 1
        if n == 7:
            n += data[i]
            i += 1
        ref -= data[i]
        i += 1
        for _ in range(n + 2):
            out.append(out[ref])
            ref += 1
    if len(out) != size:
        raise ValueError(f"lzf: {len(out)} bytes, expected {size}")
    return bytes(out)


def read_pcd(path):
    """x y z intensity (float32 arrays) of a PCD with fields x y z intensity, all F 4."""
    with open(path, "rb") as f:
        raw = f.read()
    header = {}
    pos = 0
    while True:
        end = raw.index(b"\n", pos)
        line = raw[pos:end].decode().strip()
        pos = end + 1
        if not line or line.startswith("#"):
            continue
        key, _, value = line.partition(" ")
        header[key] = value.split()
        if key == "DATA":
            break
    fields = header["FIELDS"]
    if fields[:3] != ["x", "y", "z"] or any(s != "4" for s in header["SIZE"]) or any(t != "F" for t in header["TYPE"]):
        raise ValueError(f"{path}: expected float32 fields x y z ..., got {fields}")
    n = int(header["POINTS"][0])
    nf = len(fields)
    mode = header["DATA"][0]
    if mode == "binary":
        arr = np.frombuffer(raw, dtype="<f4", count=n * nf, offset=pos).reshape(n, nf)
        cols = [arr[:, k] for k in range(nf)]
    elif mode == "binary_compressed":
        csize, usize = struct.unpack_from("<II", raw, pos)
        body = lzf_decompress(raw[pos + 8:pos + 8 + csize], usize)
        soa = np.frombuffer(body, dtype="<f4").reshape(nf, n)
        cols = [soa[k] for k in range(nf)]
    elif mode == "ascii":
        arr = np.loadtxt(raw[pos:].decode().splitlines(), dtype=np.float32, ndmin=2)
        cols = [arr[:, k] for k in range(nf)]
    else:
        raise ValueError(f"{path}: DATA {mode}")
    intensity = cols[fields.index("intensity")] if "intensity" in fields else np.zeros(n, np.float32)
    return [np.ascontiguousarray(c, dtype=np.float32) for c in cols[:3]], np.ascontiguousarray(intensity, np.float32)


# PointField datatypes.
INT8, UINT8, INT16, UINT16, INT32, UINT32, FLOAT32, FLOAT64 = range(1, 9)
NP = {FLOAT32: "f4", FLOAT64: "f8", UINT16: "u2", INT32: "i4"}


def layout_fields(layout):
    """(name, offset, datatype) per field, point_step, big endian, organized (2 rows + NaNs)."""
    if layout == "float32":  # what drivers publish: x y z intensity packed
        return [("x", 0, FLOAT32), ("y", 4, FLOAT32), ("z", 8, FLOAT32), ("intensity", 12, FLOAT32)], 16, False, False
    if layout == "float64_padded":  # float64 x y z at odd places, padding, no intensity
        return [("x", 8, FLOAT64), ("y", 16, FLOAT64), ("z", 24, FLOAT64), ("ring", 34, UINT16)], 40, False, False
    if layout == "bigendian":  # big-endian data, intensity as float32 after a gap, z first
        return [("z", 0, FLOAT32), ("x", 4, FLOAT32), ("y", 8, FLOAT32), ("intensity", 16, FLOAT32)], 24, True, False
    if layout == "organized_nan":  # 2 rows with row padding, a NaN point after each real one
        return [("x", 0, FLOAT32), ("y", 4, FLOAT32), ("z", 8, FLOAT32), ("intensity", 16, FLOAT32)], 32, False, True
    raise ValueError(layout)


def make_cloud(store, xyz, intensity, stamp_ns, layout):
    fields, step, big, organized = layout_fields(layout)
    n = len(xyz[0])
    values = {"x": xyz[0], "y": xyz[1], "z": xyz[2], "intensity": intensity, "ring": np.arange(n) % 64}
    if organized:
        # Every real point followed by a NaN one; the 2n points in 2 rows of n, each row
        # padded with 8 bytes.
        width, height = n, 2
        row_step = width * step + 8
        total = 2 * n
        for k in ("x", "y", "z", "intensity"):
            v = np.full(total, NAN, np.float32) if k != "intensity" else np.zeros(total, np.float32)
            v[0::2] = values[k]
            values[k] = v
        buf = np.zeros(height * row_step, np.uint8)
        for name, off, dt in fields:
            a = values[name].astype(np.dtype(NP[dt]).newbyteorder("<"))
            for r in range(height):
                row = buf[r * row_step:r * row_step + width * step].reshape(width, step)
                row[:, off:off + a.itemsize] = a[r * width:(r + 1) * width].view(np.uint8).reshape(width, a.itemsize)
    else:
        width, height, row_step = n, 1, n * step
        buf = np.zeros(n * step, np.uint8).reshape(n, step)
        for name, off, dt in fields:
            a = values[name].astype(np.dtype(NP[dt]).newbyteorder(">" if big else "<"))
            buf[:, off:off + a.itemsize] = a.view(np.uint8).reshape(n, a.itemsize)
        buf = buf.reshape(-1)
    sec, nsec = divmod(stamp_ns, 10**9)
    if store is ROS2:
        t = store.types
        header = t["std_msgs/msg/Header"](stamp=t["builtin_interfaces/msg/Time"](sec=sec, nanosec=nsec), frame_id="lidar")
        field_type = t["sensor_msgs/msg/PointField"]
        cloud_type = t[PC2]
    else:
        t = store.types
        header = t["std_msgs/msg/Header"](seq=0, stamp=t["builtin_interfaces/msg/Time"](sec=sec, nanosec=nsec),
                                          frame_id="lidar")
        field_type = t["sensor_msgs/msg/PointField"]
        cloud_type = t[PC2]
    return cloud_type(header=header, height=height, width=width,
                      fields=[field_type(name=f, offset=o, datatype=d, count=1) for f, o, d in fields],
                      is_bigendian=big, point_step=step, row_step=row_step, data=buf, is_dense=not organized)


def string_msg(store, text):
    return store.types["std_msgs/msg/String"](data=text)


def read_scans(scans, times):
    if os.path.isdir(scans):
        files = sorted(os.path.join(scans, f) for f in os.listdir(scans) if f.endswith(".pcd"))
    else:
        base = os.path.dirname(os.path.abspath(scans))
        files = []
        with open(scans) as f:
            for line in f:
                line = line.strip()
                if line and not line.startswith("#"):
                    files.append(os.path.join(base, line.split()[0]))
    stamps = []
    with open(times) as f:
        for line in f:
            if line.strip() and not line.startswith("#"):
                stamps.append(line.split()[0])
    return files, stamps


def write_bag(bag, fmt, compression, layout, clouds, times_ns, copy_topic=None):
    """One bag of `clouds` ((x, y, z), intensity) at `times_ns`, with a second topic
    /notes (std_msgs/String). fmt: ros1, ros2_sqlite3, ros2_mcap; compression: none, bz2
    or lz4 (ROS 1), zstd (MCAP chunks, rosbags), lz4 (MCAP chunks, the mcap package),
    "zstd (per message)" (sqlite3). With `copy_topic`, each cloud goes on that topic too."""
    store = ROS1 if fmt == "ros1" else ROS2
    if os.path.exists(bag):
        sys.exit(f"write_bags.py: {bag} exists")
    messages = []  # (topic, type, time, bytes)
    for k, ((xyz, inten), t) in enumerate(zip(clouds, times_ns)):
        msg = make_cloud(store, xyz, inten, t, layout)
        if store is ROS1:
            raw = store.serialize_ros1(msg, PC2)
        else:  # the big-endian layout in big-endian CDR as well
            raw = store.serialize_cdr(msg, PC2, little_endian=layout != "bigendian")
        messages.append(("/points", PC2, t, bytes(raw)))
        if copy_topic:
            messages.append((copy_topic, PC2, t, bytes(raw)))
        # A second topic of another type, interleaved.
        note = string_msg(store, f"scan {k}")
        nraw = store.serialize_ros1(note, "std_msgs/msg/String") if store is ROS1 else store.serialize_cdr(
            note, "std_msgs/msg/String")
        messages.append(("/notes", "std_msgs/msg/String", t + 1, bytes(nraw)))
    if fmt == "ros1":
        w = Ros1Writer(bag)
        if compression != "none":
            w.set_compression({"bz2": Ros1Writer.CompressionFormat.BZ2, "lz4": Ros1Writer.CompressionFormat.LZ4}[compression])
        with w:
            conns = {}
            for topic, typ, t, raw in messages:
                if topic not in conns:
                    conns[topic] = w.add_connection(topic, typ, typestore=ROS1)
                w.write(conns[topic], t, raw)
    elif fmt == "ros2_mcap" and compression == "lz4":
        with open(bag, "wb") as f:
            w = McapWriter(f, compression=CompressionType.LZ4, chunk_size=256 * 1024)
            w.start(profile="ros2", library="mcap python")
            channels = {}
            for topic, typ, t, raw in messages:
                if topic not in channels:
                    schema = w.register_schema(name=typ, encoding="ros2msg", data=b"")
                    channels[topic] = w.register_channel(topic=topic, message_encoding="cdr", schema_id=schema)
                w.add_message(channels[topic], log_time=t, data=raw, publish_time=t)
            w.finish()
    else:
        plugin = StoragePlugin.MCAP if fmt == "ros2_mcap" else StoragePlugin.SQLITE3
        w = Ros2Writer(bag, version=9, storage_plugin=plugin)
        if compression == "zstd (per message)":
            w.set_compression(CompressionMode.MESSAGE, CompressionFormat.ZSTD)
        elif compression == "zstd":
            w.set_compression(CompressionMode.STORAGE, CompressionFormat.ZSTD)
        with w:
            conns = {}
            for topic, typ, t, raw in messages:
                if topic not in conns:
                    conns[topic] = w.add_connection(topic, typ, typestore=ROS2)
                w.write(conns[topic], t, raw)


def read_tum(path):
    """(time text, [x y z qx qy qz qw]) per pose line of a TUM file."""
    poses = []
    with open(path) as f:
        for line in f:
            if line.strip() and not line.startswith("#"):
                v = line.split()
                poses.append((v[0], [float(x) for x in v[1:8]]))
    return poses


def odometry_poses(poses):
    """The poses in another fixed frame, as an odometry reports them: T_odom_world (30 deg
    about z, then 100, -50, 2 m) times each T_world_body, as [x y z qx qy qz qw]."""
    c, s = math.cos(math.radians(30.0)), math.sin(math.radians(30.0))
    out = []
    for _, (x, y, z, qx, qy, qz, qw) in poses:
        px, py, pz = c * x - s * y + 100.0, s * x + c * y - 50.0, z + 2.0
        # The frame's rotation (15 deg half angle about z) composed before the body's.
        hc, hs = math.cos(math.radians(15.0)), math.sin(math.radians(15.0))
        rw = hc * qw - hs * qz
        rx = hc * qx - hs * qy
        ry = hc * qy + hs * qx
        rz = hc * qz + hs * qw
        out.append([px, py, pz, rx, ry, rz, rw])
    return out


def write_odometry_bag(bag, fmt, clouds, times_ns, odom, big_endian=False):
    """The float32 clouds on /points and nav_msgs/Odometry on /odom at the same record
    times (poses `odom`, frame odom, child base_link)."""
    store = ROS1 if fmt == "ros1" else ROS2
    t = store.types
    odom_type = "nav_msgs/msg/Odometry"
    messages = []
    for (xyz, inten), stamp, (x, y, z, qx, qy, qz, qw) in zip(clouds, times_ns, odom):
        cloud = make_cloud(store, xyz, inten, stamp, "float32")
        sec, nsec = divmod(stamp, 10**9)
        time = t["builtin_interfaces/msg/Time"](sec=sec, nanosec=nsec)
        header = (t["std_msgs/msg/Header"](stamp=time, frame_id="odom") if store is ROS2 else
                  t["std_msgs/msg/Header"](seq=0, stamp=time, frame_id="odom"))
        vec = t["geometry_msgs/msg/Vector3"]
        cov = np.zeros(36, np.float64)
        cov[0::7] = [0.01, 0.01, 0.01, 0.001, 0.001, 0.001]
        msg = t[odom_type](
            header=header, child_frame_id="base_link",
            pose=t["geometry_msgs/msg/PoseWithCovariance"](
                pose=t["geometry_msgs/msg/Pose"](position=t["geometry_msgs/msg/Point"](x=x, y=y, z=z),
                                                 orientation=t["geometry_msgs/msg/Quaternion"](x=qx, y=qy, z=qz, w=qw)),
                covariance=cov),
            twist=t["geometry_msgs/msg/TwistWithCovariance"](
                twist=t["geometry_msgs/msg/Twist"](linear=vec(x=0.0, y=0.0, z=0.0), angular=vec(x=0.0, y=0.0, z=0.0)),
                covariance=np.zeros(36, np.float64)))
        if store is ROS1:
            messages.append(("/points", PC2, stamp, bytes(store.serialize_ros1(cloud, PC2))))
            messages.append(("/odom", odom_type, stamp, bytes(store.serialize_ros1(msg, odom_type))))
        else:
            messages.append(("/points", PC2, stamp, bytes(store.serialize_cdr(cloud, PC2))))
            messages.append(("/odom", odom_type, stamp,
                             bytes(store.serialize_cdr(msg, odom_type, little_endian=not big_endian))))
    if fmt == "ros1":
        with Ros1Writer(bag) as w:
            conns = {}
            for topic, typ, stamp, raw in messages:
                if topic not in conns:
                    conns[topic] = w.add_connection(topic, typ, typestore=ROS1)
                w.write(conns[topic], stamp, raw)
    else:
        with Ros2Writer(bag, version=9, storage_plugin=StoragePlugin.MCAP) as w:
            conns = {}
            for topic, typ, stamp, raw in messages:
                if topic not in conns:
                    conns[topic] = w.add_connection(topic, typ, typestore=ROS2)
                w.write(conns[topic], stamp, raw)


def imu_samples(start_ns, count=60, period_ns=5_000_000):
    """Deterministic IMU samples from `start_ns`: (time_ns, [wx wy wz], [ax ay az])."""
    out = []
    for k in range(count):
        w = [0.01 * k - 0.2, math.sin(0.37 * k), -1.0 / (k + 2.0)]
        a = [math.cos(0.11 * k), 0.125 * k - 1.0, 9.80665 + 0.001 * k]
        out.append((start_ns + k * period_ns, w, a))
    return out


def write_imu_bag(bag, fmt, samples, big_endian=False):
    """sensor_msgs/Imu on /imu (frame imu_link), recorded and stamped at each sample's time."""
    store = ROS1 if fmt == "ros1" else ROS2
    t = store.types
    typ = "sensor_msgs/msg/Imu"
    vec = t["geometry_msgs/msg/Vector3"]
    raws = []
    for stamp, w, a in samples:
        sec, nsec = divmod(stamp, 10**9)
        time = t["builtin_interfaces/msg/Time"](sec=sec, nanosec=nsec)
        header = (t["std_msgs/msg/Header"](stamp=time, frame_id="imu_link") if store is ROS2 else
                  t["std_msgs/msg/Header"](seq=0, stamp=time, frame_id="imu_link"))
        cov = np.zeros(9, np.float64)
        msg = t[typ](header=header, orientation=t["geometry_msgs/msg/Quaternion"](x=0.0, y=0.0, z=0.0, w=1.0),
                     orientation_covariance=np.array([-1.0] + [0.0] * 8), angular_velocity=vec(x=w[0], y=w[1], z=w[2]),
                     angular_velocity_covariance=cov, linear_acceleration=vec(x=a[0], y=a[1], z=a[2]),
                     linear_acceleration_covariance=cov)
        raw = (store.serialize_ros1(msg, typ) if store is ROS1 else
               store.serialize_cdr(msg, typ, little_endian=not big_endian))
        raws.append((stamp, bytes(raw)))
    if fmt == "ros1":
        with Ros1Writer(bag) as wr:
            conn = wr.add_connection("/imu", typ, typestore=ROS1)
            for stamp, raw in raws:
                wr.write(conn, stamp, raw)
    else:
        plugin = StoragePlugin.MCAP if fmt == "ros2_mcap" else StoragePlugin.SQLITE3
        with Ros2Writer(bag, version=9, storage_plugin=plugin) as wr:
            conn = wr.add_connection("/imu", typ, typestore=ROS2)
            for stamp, raw in raws:
                wr.write(conn, stamp, raw)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--scans", required=True)
    p.add_argument("--times", required=True)
    p.add_argument("--prefix", default="sample")
    p.add_argument("--only", help="write only this bag (a name from the list below)")
    p.add_argument("--odometry", help="also write PREFIX_odometry.bag (ROS 1) and PREFIX_odometry_mcap (ROS 2, "
                   "big-endian CDR odometry): the scans on /points and these TUM poses, moved into another fixed "
                   "frame, as nav_msgs/Odometry on /odom; and those poses as OUT/PREFIX_odometry_tum.txt; and "
                   "sensor_msgs/Imu samples on /imu as PREFIX_imu.bag (ROS 1), PREFIX_imu_sqlite3, PREFIX_imu_mcap "
                   "(ROS 2, big-endian CDR) and OUT/PREFIX_imu.csv")
    args = p.parse_args()
    files, stamps = read_scans(args.scans, args.times)
    if os.path.isdir(args.scans):
        if len(stamps) != len(files):
            sys.exit(f"write_bags.py: {len(files)} scans but {len(stamps)} times")
    else:
        # A list with times (`path time`): each scan's own time.
        stamps = []
        with open(args.scans) as f:
            for line in f:
                if line.strip() and not line.startswith("#"):
                    stamps.append(line.split()[1])
    # Exact decimal seconds to nanoseconds (through a double, 1.6e18 ns would be rounded to
    # 256 ns).
    times_ns = [int(decimal.Decimal(s).scaleb(9).to_integral_value()) for s in stamps]
    clouds = [read_pcd(f) for f in files]
    os.makedirs(args.out, exist_ok=True)
    manifest_path = os.path.join(args.out, "manifest.json")
    manifest = json.load(open(manifest_path)) if os.path.exists(manifest_path) else {"bags": []}

    # name, format, compression, layout, writer
    bags = [
        ("sqlite3", "ros2_sqlite3", "none", "float32"),
        ("sqlite3_zstd", "ros2_sqlite3", "zstd (per message)", "float64_padded"),
        ("mcap", "ros2_mcap", "none", "bigendian"),
        ("mcap_zstd", "ros2_mcap", "zstd", "organized_nan"),
        ("mcap_lz4", "ros2_mcap", "lz4", "float32"),
        ("ros1", "ros1", "none", "float32"),
        ("ros1_bz2", "ros1", "bz2", "float64_padded"),
        ("ros1_lz4", "ros1", "lz4", "organized_nan"),
    ]
    for name, fmt, compression, layout in bags:
        if args.only and name != args.only:
            continue
        bag = os.path.join(args.out, f"{args.prefix}_{name}")
        if fmt == "ros1":
            bag += ".bag"
        elif name == "mcap_lz4":
            bag += ".mcap"
        write_bag(bag, fmt, compression, layout, clouds, times_ns)
        manifest["bags"] = [b for b in manifest["bags"] if b["path"] != bag]
        manifest["bags"].append({"path": bag, "name": f"{args.prefix}_{name}", "format": fmt, "compression": compression,
                                 "layout": layout, "topic": "/points", "scans": files, "times_ns": times_ns,
                                 "intensity": layout != "float64_padded"})
        print(f"wrote {bag} ({fmt}, {compression}, {layout}, {len(files)} scans)")
    if args.odometry:
        poses = read_tum(args.odometry)
        if len(poses) != len(clouds):
            sys.exit(f"write_bags.py: {len(clouds)} scans but {len(poses)} odometry poses")
        odom = odometry_poses(poses)
        write_odometry_bag(os.path.join(args.out, f"{args.prefix}_odometry.bag"), "ros1", clouds, times_ns, odom)
        write_odometry_bag(os.path.join(args.out, f"{args.prefix}_odometry_mcap"), "ros2_mcap", clouds, times_ns, odom,
                           big_endian=True)
        with open(os.path.join(args.out, f"{args.prefix}_odometry_tum.txt"), "w") as f:
            for (stamp, _), v in zip(poses, odom):
                f.write(stamp + " " + " ".join(f"{x:.9f}" for x in v) + "\n")
        print(f"wrote {args.prefix}_odometry.bag, {args.prefix}_odometry_mcap and {args.prefix}_odometry_tum.txt")
        # IMU samples from the first scan's time, in the three containers, and as CSV.
        samples = imu_samples(times_ns[0])
        write_imu_bag(os.path.join(args.out, f"{args.prefix}_imu.bag"), "ros1", samples)
        write_imu_bag(os.path.join(args.out, f"{args.prefix}_imu_sqlite3"), "ros2_sqlite3", samples)
        write_imu_bag(os.path.join(args.out, f"{args.prefix}_imu_mcap"), "ros2_mcap", samples, big_endian=True)
        with open(os.path.join(args.out, f"{args.prefix}_imu.csv"), "w") as f:
            f.write("time,wx,wy,wz,ax,ay,az\n")
            for stamp, w, a in samples:
                sec, nsec = divmod(stamp, 10**9)
                f.write(f"{sec}.{nsec:09d}," + ",".join(repr(v) for v in w + a) + "\n")
        print(f"wrote {args.prefix}_imu.bag, {args.prefix}_imu_sqlite3, {args.prefix}_imu_mcap and {args.prefix}_imu.csv")
    if not args.only:
        # Two PointCloud2 topics (not in the manifest: a reader must be told which).
        write_bag(os.path.join(args.out, f"{args.prefix}_two_clouds.bag"), "ros1", "none", "float32", clouds[:2],
                  times_ns[:2], copy_topic="/points_copy")
    with open(manifest_path, "w") as f:
        json.dump(manifest, f, indent=1)


if __name__ == "__main__":
    main()
