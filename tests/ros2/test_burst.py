"""The node under load, with scans of 100,000 points: a simulated 10 Hz drive of 100 HDL-32
scans (`ndtcu simulate`, the sample's world), each point repeated with 5 mm of noise, x y
z intensity: 1.6 MB messages, built as CDR here (no Python message of 1.6 MB).

- latency: 50 scans at their 10 Hz: the node's own cost per scan (message in to ndt_pose
  out, minus the library's time: the scan's crop and filter, and the Localizer's frame with
  its alignments, checks and covariance), from its diagnostics;
  written to latency.json in the test's folder (docs/ros2.md quotes it);
- two bursts of 50 scans at 100 Hz (the drive's next 5 s arriving in 0.5 s): the node
  keeps up by dropping (newest wins): the last scan of a burst is answered within a frame
  or two of its arrival (no backlog), every scan heard is localized or counted as dropped,
  the poses out are right, and its memory after the second burst is where it was after the
  first."""
import json
import struct
import subprocess
import time

import numpy as np
from rclpy.serialization import serialize_message

from conftest import (SCAN_MATCHING, cloud_msg, init_arg, pose_matrix, read_tum, start_node, wait_until)

import ndtcu

POINTS = 100_000
FRAMES = 101  # the first, then two bursts of 50
# A pose out is right within this of the drive's truth (m): `ndtcu localize`'s success
# radius. The node's poses equal localize's (test_node.py); NDT itself leaves a few of this
# drive's scans 5-6 cm off (2 cm range noise, 0.25 m map voxels, 2 m NDT cells).
TRUTH_TOLERANCE_M = 0.10
# The node's own cost per scan may not exceed this median (ms). The target is 1 ms on 2
# cores (docs/ros2.md has the measured figure); the bound leaves room for a loaded CI
# machine and still fails a node that copies or converts the points in Python (tens of ms).
OVERHEAD_BOUND_MS = 5.0
# A queue of 50 scans would be 80 MB; the subscription's history (10 deep) and the
# newest-wins slot hold at most 12 at once (19 MB), whichever burst first fills them: on a
# loaded machine it was the second (+2.5 MB after the first burst, +16 MB after the
# second), so the bound is on both bursts together, from before the first.
BURST_GROWTH_BOUND_KB = 40_000


def simulate(cli, out):
    """The drive: `ndtcu simulate` as data/sample/README.md makes the sample, FRAMES frames."""
    subprocess.run([cli, "-q", "simulate", "--out", str(out), "--seed", "17", "--world-size", "80", "--sensor",
                    "hdl32", "--columns", "300", "--frames", str(FRAMES), "--map-voxel", "0.25", "--encoding",
                    "binary"], check=True, timeout=60, stdout=subprocess.DEVNULL)
    return read_tum(out / "poses_tum.txt")


def cdr_cloud(xyzi, stamp_ns, templates={}):
    """A PointCloud2 of float32 x y z intensity rows in little-endian CDR: a cloud serialized
    with its layout and no data, the points spliced in (data is the last field but the
    is_dense byte) and the stamp set."""
    n = len(xyzi)
    if n not in templates:
        layout = cloud_msg(np.zeros((0, 4), dtype=np.float32), 0, fields=("x", "y", "z", "intensity"), width=n,
                           row_step=16 * n)
        templates[n] = serialize_message(layout)[:-5]  # without the empty data's length and is_dense
    head = bytearray(templates[n])
    sec, nanosec = divmod(stamp_ns, 1_000_000_000)
    struct.pack_into("<iI", head, 4, sec, nanosec)
    return bytes(head) + struct.pack("<I", 16 * n) + xyzi.tobytes() + b"\x01"


def messages(drive_dir, poses, frames, seed):
    rng = np.random.default_rng(seed)
    out = []
    for k in frames:
        pts = np.array(ndtcu.read_point_cloud(str(drive_dir / "scans" / f"{k:06d}.pcd")).points)
        tiled = np.tile(pts, (-(-POINTS // len(pts)), 1))[:POINTS] + rng.normal(0.0, 0.005, (POINTS, 3))
        xyzi = np.hstack([tiled, np.ones((POINTS, 1))]).astype(np.float32)
        out.append((round(poses[k][0] * 1e9), cdr_cloud(xyzi, round(poses[k][0] * 1e9))))
    return out


def statuses_by_stamp(listener):
    return {int(v["topic_time_stamp"]): v for _, _, v in listener.statuses(SCAN_MATCHING)}


def check_poses(listener, poses):
    by_stamp = {round(t * 1e9): p for t, p in poses}
    for p in listener.messages("ndt_pose"):
        stamp = p.header.stamp.sec * 1_000_000_000 + p.header.stamp.nanosec
        assert np.linalg.norm(pose_matrix(p.pose)[:3, 3] - by_stamp[stamp][:3, 3]) < TRUTH_TOLERANCE_M


def test_latency(listener, tmp_path, cli):
    poses = simulate(cli, tmp_path / "drive")
    scans = messages(tmp_path / "drive", poses, range(50), 5)
    node = start_node(listener, tmp_path, [init_arg(poses[0][1])], map_path=tmp_path / "drive" / "map.pcd")
    try:
        start = time.monotonic()
        for i, (_, raw) in enumerate(scans):
            time.sleep(max(0.0, start + 0.1 * i - time.monotonic()))
            listener.points.publish(raw)
        assert wait_until(lambda: len(listener.statuses()) >= len(scans), 20.0), \
            (len(listener.statuses()), node.log())
    finally:
        rc = node.stop()
    assert rc == 0, node.log()
    values = [v for _, _, v in listener.statuses()]
    # topic_time_stamp: the scan's stamp in nanoseconds, as Autoware's node writes it.
    assert [int(v["topic_time_stamp"]) for v in values] == [t for t, _ in scans]
    assert all(v["dropped_scan_count"] == "0" and v["is_converged"] == "true" for v in values)
    check_poses(listener, poses)
    frames = values[1:]  # the first frame pays for the first allocations

    def median(key):
        return float(np.median([float(v[key]) for v in frames]))

    figures = {key: median(key) for key in ("node_overhead_ms", "node_latency_ms", "decode_time_ms",
                                            "preprocess_time_ms", "align_time_ms", "covariance_time_ms",
                                            "localize_time_ms", "slot_wait_ms", "publish_time_ms")}
    figures.update(frames=len(frames), points=POINTS,
                   overhead_p95_ms=float(np.percentile([float(v["node_overhead_ms"]) for v in frames], 95)))
    (tmp_path / "latency.json").write_text(json.dumps(figures, indent=1))
    print("node latency (medians):", json.dumps(figures))
    assert figures["node_overhead_ms"] < OVERHEAD_BOUND_MS, figures


def burst(listener, scans):
    """`scans` published at 100 Hz; returns when the last was published."""
    start = time.monotonic()
    for i, (_, raw) in enumerate(scans):
        time.sleep(max(0.0, start + 0.01 * i - time.monotonic()))
        listener.points.publish(raw)
    return time.monotonic()


def answer_time(listener, stamp_ns):
    for t, a in listener.timed("/diagnostics"):
        for s in a.status:
            if s.name == SCAN_MATCHING and any(kv.key == "topic_time_stamp" and int(kv.value) == stamp_ns
                                               for kv in s.values):
                return t
    return None


def test_burst(listener, tmp_path, cli):
    poses = simulate(cli, tmp_path / "drive")
    node = start_node(listener, tmp_path, [init_arg(poses[0][1])], map_path=tmp_path / "drive" / "map.pcd")
    published = 0
    try:
        first = messages(tmp_path / "drive", poses, [0], 3)
        listener.points.publish(first[0][1])
        published += 1
        assert wait_until(lambda: len(listener.statuses()) >= 1, 20.0), node.log()
        rss = [node.rss_kb()]
        for frames in (range(1, 51), range(51, 101)):
            scans = messages(tmp_path / "drive", poses, frames, frames[0])
            last_out = burst(listener, scans)
            published += len(scans)
            last = scans[-1][0]
            assert wait_until(lambda: last in statuses_by_stamp(listener), 20.0), node.log()
            # No backlog: the last scan waited for at most the frame under way, then its own.
            frame_ms = float(statuses_by_stamp(listener)[last]["node_latency_ms"])
            waited_ms = (answer_time(listener, last) - last_out) * 1e3
            assert waited_ms < 3 * frame_ms + 200.0, (waited_ms, frame_ms)
            time.sleep(0.2)
            rss.append(node.rss_kb())
        assert node.proc.poll() is None
    finally:
        rc = node.stop()
    assert rc == 0, node.log()

    statuses = listener.statuses()
    final = statuses[-1][2]
    received, dropped = int(final["received_scan_count"]), int(final["dropped_scan_count"])
    # Every scan heard is a status (localized or refused) or a drop; best effort may lose a
    # few on the way, never many.
    assert received >= published - 5, (received, published)
    assert len(statuses) + dropped == received, (len(statuses), dropped, received)
    latency = float(np.median([float(v["node_latency_ms"]) for _, _, v in statuses]))
    if latency > 12.0:  # each frame takes longer than the scans come: it must have dropped
        assert dropped > 0, (latency, final)
    assert all(v["refused_scan_count"] == "0" and v["is_converged"] == "true" for _, _, v in statuses)
    # Memory: bounded by the subscription's buffers over both bursts, never a queue of them.
    assert max(rss) - rss[0] < BURST_GROWTH_BOUND_KB, rss
    check_poses(listener, poses)
    print(f"burst: {published} published, {received} heard, {len(statuses)} localized, {dropped} dropped; "
          f"rss {rss} kB; median frame {latency:.1f} ms")
