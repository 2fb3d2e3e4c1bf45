"""ndtcu_ros2_play on its own (record-time pacing, what it publishes from ROS 2 and ROS 1
bags, --initialpose, --rate 0 without a node), the node's refusals at start (the parameter
file's checks are `ndtcu localize --config`'s), and the environment ndtcu.ros2 gives rclpy."""
import os
import pathlib
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from geometry_msgs.msg import PoseWithCovarianceStamped
from nav_msgs.msg import Odometry
from sensor_msgs.msg import PointCloud2

from conftest import BAD_CONFIG, CONFIG, SAMPLE, Process, matrix, pose_matrix, read_tum, wait_until

import ndtcu

FRAMES = 10


class Recorder:
    """Messages of `topics` ({name: type}) heard by this process, with their arrival times."""

    def __init__(self, listener, topics):
        self.lock = threading.Lock()
        self.got = {t: [] for t in topics}
        for topic, typ in topics.items():
            listener.node.create_subscription(typ, topic, self._record(topic), 100)

    def _record(self, topic):
        def record(msg):
            with self.lock:
                self.got[topic].append((time.monotonic(), msg))
        return record

    def __getitem__(self, topic):
        with self.lock:
            return list(self.got[topic])


def play(tmp_path, *args, timeout=60):
    p = Process("ndtcu.ros2.play", list(map(str, args)), tmp_path / "play.log")
    assert p.wait(timeout) == 0, p.log()
    return p.log()


def test_record_time_pacing(listener, tmp_path, bags):
    rec = Recorder(listener, {"points_raw": PointCloud2})
    rate = 2.0
    log = play(tmp_path, bags["sample_mcap_zstd"]["path"], "--rate", rate, "--wait", "20")
    assert f"{FRAMES} scans" in log
    assert wait_until(lambda: len(rec["points_raw"]) == FRAMES, 5.0), len(rec["points_raw"])
    times = [t for t, _ in rec["points_raw"]]
    gaps = np.diff(times)
    # The sample is a 10 Hz drive: at rate 2, 50 ms apart. Delivery adds jitter of its own
    # (a loaded 2-core machine: up to tens of ms), not a drift.
    assert abs((times[-1] - times[0]) - (FRAMES - 1) * 0.1 / rate) < 0.1, gaps
    assert gaps.min() > 0.0 and np.median(gaps) == pytest.approx(0.1 / rate, abs=0.015), gaps
    # The bag's own bytes: the stamps it recorded.
    stamps = [m.header.stamp.sec + m.header.stamp.nanosec * 1e-9 for _, m in rec["points_raw"]]
    assert stamps == pytest.approx([t for t, _ in read_tum(SAMPLE / "poses_tum.txt")], abs=1e-9)


@pytest.mark.parametrize("bag_name", ["sample_odometry_mcap", "sample_odometry.bag"])
def test_odometry_and_ros1_scans(listener, tmp_path, bags, bag_name):
    """A ROS 2 bag's odometry as it is (big-endian CDR), a ROS 1 bag's read and built again;
    a ROS 1 bag's scans decoded and encoded again, the same points."""
    bag = pathlib.Path(os.environ["NDTCU_BAG_DIR"]) / bag_name
    rec = Recorder(listener, {"points_raw": PointCloud2, "/odom": Odometry})
    play(tmp_path, bag, "--rate", "5", "--wait", "20")
    assert wait_until(lambda: len(rec["/odom"]) == FRAMES and len(rec["points_raw"]) == FRAMES, 5.0)
    expected = read_tum(pathlib.Path(os.environ["NDTCU_BAG_DIR"]) / "sample_odometry_tum.txt")
    for (_, m), (t, pose) in zip(rec["/odom"], expected):
        assert m.header.stamp.sec + m.header.stamp.nanosec * 1e-9 == pytest.approx(t, abs=1e-9)
        assert np.abs(pose_matrix(m.pose.pose) - pose).max() < 1e-6
    reader = ndtcu.BagReader(str(bag))
    for k, (_, m) in enumerate(rec["points_raw"]):
        cloud = reader.read_point_cloud("/points", k)
        got = np.frombuffer(bytes(m.data), dtype=np.float32).reshape(m.width * m.height, -1)
        assert np.array_equal(got[:, :3], np.asarray(cloud.world_points(), dtype=np.float32))


def test_initialpose_and_unanswered_scans(listener, tmp_path, bags):
    rec = Recorder(listener, {"initialpose": PoseWithCovarianceStamped, "points_raw": PointCloud2})
    xyzrpy = [1.0, -2.0, 0.5, 0.0, 0.0, np.pi / 2]
    log = play(tmp_path, bags["sample_mcap"]["path"], "--rate", "0", "--answer-timeout", "0.1",
               "--initialpose", ",".join(map(str, xyzrpy)), "--wait", "20")
    assert f"{FRAMES} scans, 0 answered" in log, log
    assert wait_until(lambda: len(rec["initialpose"]) == 1, 5.0)
    m = rec["initialpose"][0][1]
    assert m.header.frame_id == "map"
    assert np.abs(pose_matrix(m.pose.pose) - ndtcu.pose_to_matrix(np.array(xyzrpy))).max() < 1e-9
    assert m.pose.covariance[0] == 0.25 and m.pose.covariance[35] == pytest.approx(0.0685389, abs=1e-6)


def node_run(tmp_path, *args, timeout=60):
    """The node run to its end (it refuses to start): exit code and output."""
    p = subprocess.run([sys.executable, "-m", "ndtcu.ros2.scan_matcher", *map(str, args)], capture_output=True,
                       text=True, timeout=timeout)
    return p.returncode, p.stdout + p.stderr


def test_node_refuses_what_localize_refuses(tmp_path, cli):
    """The parameter file's checks are `ndtcu localize --config`'s: the same error. An option
    of localize for files, and a map that is not there, are refused too; each exits 2."""
    localize = subprocess.run([cli, "localize", "--map", str(SAMPLE / "map.pcd"), "--scans", str(SAMPLE / "scans"),
                               "--config", str(BAD_CONFIG), "--out", str(tmp_path / "out")],
                              capture_output=True, text=True, timeout=60)
    assert localize.returncode == 1
    message = localize.stderr.strip().removeprefix("ndtcu: error: ")
    assert "ndt.resolution" in message
    rc, out = node_run(tmp_path, "--ros-args", "--params-file", BAD_CONFIG, "-p", f"map_path:={SAMPLE / 'map.pcd'}")
    assert rc == 2 and message in out, out

    rc, out = node_run(tmp_path, "--scans", SAMPLE / "scans", "--ros-args", "--params-file", CONFIG, "-p",
                       f"map_path:={SAMPLE / 'map.pcd'}")
    assert rc == 2 and "--scans: an option of `ndtcu localize` for files" in out, out
    rc, out = node_run(tmp_path, "--ros-args", "--params-file", CONFIG, "-p", f"map_path:={tmp_path / 'none.pcd'}")
    assert rc == 2 and "none.pcd" in out, out
    rc, out = node_run(tmp_path, "--voxel", "-1", "--ros-args", "-p", f"map_path:={SAMPLE / 'map.pcd'}")
    assert rc == 2 and "--voxel" in out, out
    rc, out = node_run(tmp_path, "--help")
    assert rc == 0 and "ndtcu_scan_matcher" in out


def test_environment_is_set_by_the_package(tmp_path):
    """rclpy from the wheels needs their library folders on LD_LIBRARY_PATH before the
    process starts: ndtcu.ros2.environment.prepare() re-executes an interpreter started
    without them (and without the wheels' own bootstrap), and names Fast DDS and the
    package's transport profile."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("LD_LIBRARY_PATH", "RMW_IMPLEMENTATION", "FASTDDS_DEFAULT_PROFILES_FILE")}
    env["_ROS_WHEELS_BOOTSTRAP_COMPLETE"] = "1"  # the wheels' .pth stands aside
    code = ("import os, sys; from ndtcu.ros2 import environment; assert environment.prepare(); import rclpy; "
            "rclpy.init(); n = rclpy.create_node('ndtcu_environment_check'); "
            "print(os.environ['RMW_IMPLEMENTATION'], os.path.basename(os.environ['FASTDDS_DEFAULT_PROFILES_FILE'])); "
            "n.destroy_node(); rclpy.shutdown()")
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["rmw_fastrtps_cpp", "fastdds_profile.xml"]
    # Without prepare(), the same interpreter cannot load rclpy: the test would pass for nothing.
    p = subprocess.run([sys.executable, "-c", "import rclpy; rclpy.init()"], env=env, capture_output=True, text=True,
                       timeout=60)
    assert p.returncode != 0 and "cannot open shared object file" in p.stderr


def test_matrix_helper():
    """The tests' quaternion helper against the library's (the other tests rest on it)."""
    t = ndtcu.pose_to_matrix(np.array([1.0, 2.0, 3.0, 0.3, -0.2, 2.5]))
    from ndtcu.ros2.play import quaternion_xyzw

    assert np.abs(matrix(t[:3, 3], quaternion_xyzw(t[:3, :3])) - t).max() < 1e-12
