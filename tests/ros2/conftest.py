"""The ROS 2 node's tests: real DDS on localhost (Fast DDS from PyPI's wheels), in the
ROS_DOMAIN_ID run_ros2_tests.sh gives each test file. The node and the player run as
processes of their own; this process listens (and publishes the crafted messages) through
one rclpy node spun on a thread. Every wait has a deadline."""
import csv
import os
import pathlib
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from ndtcu.ros2 import environment

if not environment.prepare():  # run_ros2_tests.sh skips before this
    pytest.exit(environment.missing_message(), returncode=77)

import rclpy  # noqa: E402
from diagnostic_msgs.msg import DiagnosticArray  # noqa: E402
from geometry_msgs.msg import PoseStamped, PoseWithCovarianceStamped  # noqa: E402
from rclpy.executors import SingleThreadedExecutor  # noqa: E402
from rclpy.qos import QoSProfile, ReliabilityPolicy  # noqa: E402
from sensor_msgs.msg import PointCloud2  # noqa: E402
from std_msgs.msg import Float32, Int32  # noqa: E402

import ndtcu  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "data" / "sample"
CONFIG = ROOT / "tests" / "cli" / "autoware" / "ndt_scan_matcher.param.yaml"
BAD_CONFIG = ROOT / "tests" / "cli" / "autoware" / "negative_resolution.yaml"
# How long a node may take to start (rclpy, the map) and anything to arrive, at most.
START_TIMEOUT_S = 30.0
SCAN_MATCHING = "ndt_scan_matcher: scan_matching_status"


def data_dir():
    """../shared/data (NDTCU_DATA_DIR), or None when absent."""
    d = pathlib.Path(os.environ.get("NDTCU_DATA_DIR") or ROOT.parent / "shared" / "data")
    return d if d.is_dir() else None


@pytest.fixture(scope="session")
def cli():
    path = os.environ.get("NDTCU_CLI", "")
    assert path and os.access(path, os.X_OK), "NDTCU_CLI (the ndtcu command-line tool) not given"
    return path


@pytest.fixture(scope="session")
def bags():
    """The sample bags of the rosbag_bags fixture, by name (tests/rosbag/write_bags.py)."""
    import json

    d = pathlib.Path(os.environ["NDTCU_BAG_DIR"])
    manifest = json.loads((d / "manifest.json").read_text())
    return {b["name"]: b for b in manifest["bags"]}


@pytest.fixture(scope="session")
def ros():
    rclpy.init()
    yield
    rclpy.shutdown()


def wait_until(predicate, timeout, step=0.01):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return predicate()


class Listener:
    """A node of this process: what the scan matcher publishes, recorded with arrival times,
    and publishers for the crafted inputs."""

    def __init__(self, name="ndtcu_test_listener"):
        self.node = rclpy.create_node(name)
        self.lock = threading.Lock()
        self.got = {}
        for topic, typ in (("ndt_pose", PoseStamped), ("ndt_pose_with_covariance", PoseWithCovarianceStamped),
                           ("points_aligned", PointCloud2), ("/diagnostics", DiagnosticArray),
                           ("transform_probability", Float32), ("nearest_voxel_transformation_likelihood", Float32),
                           ("iteration_num", Int32), ("exe_time_ms", Float32)):
            self.got[topic] = []
            self.node.create_subscription(typ, topic, self._recorder(topic), 1000)
        qos = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
        self.points = self.node.create_publisher(PointCloud2, "points_raw", qos)
        self.ekf = self.node.create_publisher(PoseWithCovarianceStamped, "ekf_pose_with_covariance", qos)
        self.regularization = self.node.create_publisher(PoseWithCovarianceStamped,
                                                         "regularization_pose_with_covariance", qos)
        self.initialpose = self.node.create_publisher(PoseWithCovarianceStamped, "initialpose", qos)
        self.executor = SingleThreadedExecutor()
        self.executor.add_node(self.node)
        self.thread = threading.Thread(target=self.executor.spin, daemon=True)
        self.thread.start()

    def _recorder(self, topic):
        def record(msg):
            with self.lock:
                self.got[topic].append((time.monotonic(), msg))
        return record

    def messages(self, topic):
        with self.lock:
            return [m for _, m in self.got[topic]]

    def timed(self, topic):
        with self.lock:
            return list(self.got[topic])

    def statuses(self, name=SCAN_MATCHING):
        """The diagnostics' statuses of `name`, each as (level, message, {key: value})."""
        out = []
        for a in self.messages("/diagnostics"):
            for s in a.status:
                if s.name == name:
                    out.append((s.level, s.message, {kv.key: kv.value for kv in s.values}))
        return out

    def clear(self):
        with self.lock:
            for v in self.got.values():
                v.clear()

    def close(self):
        self.executor.shutdown(timeout_sec=2.0)
        self.node.destroy_node()


@pytest.fixture
def listener(ros):
    lst = Listener()
    yield lst
    lst.close()


class Process:
    """A program of the package run as a process (`python -m MODULE ARGS`), its output in a
    log file; stopped by SIGINT at the end."""

    def __init__(self, module, args, log_path):
        self.log_path = pathlib.Path(log_path)
        self.log_file = open(self.log_path, "wb")
        self.proc = subprocess.Popen([sys.executable, "-m", module, *map(str, args)], stdout=self.log_file,
                                     stderr=subprocess.STDOUT, env=dict(os.environ))

    def log(self):
        if not self.log_file.closed:
            self.log_file.flush()
        return self.log_path.read_text(errors="replace")

    def wait(self, timeout):
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
            raise AssertionError(f"{self.proc.args} did not end within {timeout} s:\n{self.log()}")

    def stop(self, timeout=15.0):
        """SIGINT, then the exit code (killed after `timeout` s)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
            return None
        finally:
            self.log_file.close()

    def rss_kb(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0


def start_node(listener, tmp_path, args=(), params=(), config=CONFIG, map_path=SAMPLE / "map.pcd", name="node"):
    """ndtcu_scan_matcher with `args` (localize options), Autoware's parameter file and the
    map; returns once its points_raw subscription is seen (it subscribes after the map)."""
    ros_args = ["--ros-args"]
    if config:
        ros_args += ["--params-file", str(config)]
    if map_path:
        ros_args += ["-p", f"map_path:={map_path}"]
    for p in params:
        ros_args += ["-p", p]
    node = Process("ndtcu.ros2.scan_matcher", [*args, *ros_args], tmp_path / f"{name}.log")
    ok = wait_until(lambda: listener.points.get_subscription_count() > 0 or node.proc.poll() is not None,
                    START_TIMEOUT_S)
    if not ok or node.proc.poll() is not None:
        rc = node.stop()
        raise AssertionError(f"the node did not start (exit {rc}):\n{node.log()}")
    time.sleep(SETTLE_S)
    return node


def localize_cli(cli, bag, out, *args):
    """`ndtcu localize` on the bag with the node's settings: {stamp (s, 6 decimals): TUM line}
    and frames.csv's rows."""
    cmd = [cli, "-q", "localize", "--map", str(SAMPLE / "map.pcd"), "--scans", str(bag), "--config", str(CONFIG),
           "--out", str(out), "--no-plot", *map(str, args)]
    subprocess.run(cmd, check=True, timeout=120)
    lines = (pathlib.Path(out) / "trajectory_tum.txt").read_text().splitlines()
    with open(pathlib.Path(out) / "frames.csv") as f:
        frames = list(csv.DictReader(f))
    return {ln.split()[0]: ln for ln in lines if ln and not ln.startswith("#")}, frames


def matrix(position, quaternion):
    """A 4x4 transform of a position and a quaternion [x y z w]."""
    q = np.asarray(quaternion, dtype=np.float64)
    x, y, z, w = q / np.linalg.norm(q)
    t = np.eye(4)
    t[:3, :3] = [[1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
                 [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
                 [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)]]
    t[:3, 3] = position
    return t


def pose_with_covariance_msg(pose, stamp_ns, covariance, frame_id="map"):
    """A geometry_msgs/PoseWithCovarianceStamped of a 4x4 pose at `stamp_ns` (ns), with a 6x6
    covariance."""
    from ndtcu.ros2.play import quaternion_xyzw

    m = PoseWithCovarianceStamped()
    m.header.frame_id = frame_id
    m.header.stamp.sec, m.header.stamp.nanosec = divmod(int(stamp_ns), 1_000_000_000)
    m.pose.pose.position.x, m.pose.pose.position.y, m.pose.pose.position.z = (float(v) for v in pose[:3, 3])
    o = m.pose.pose.orientation
    o.x, o.y, o.z, o.w = (float(v) for v in quaternion_xyzw(pose[:3, :3]))
    m.pose.covariance = [float(v) for v in np.asarray(covariance, dtype=np.float64).reshape(36)]
    return m


def pose_matrix(pose):
    """A geometry_msgs/Pose as a 4x4 transform."""
    o = pose.orientation
    return matrix([pose.position.x, pose.position.y, pose.position.z], [o.x, o.y, o.z, o.w])


def tum_line(stamp, pose):
    """The TUM line `ndtcu localize` would write for a pose message at `stamp`."""
    return ndtcu.tum_line(stamp.sec + stamp.nanosec * 1e-9, pose_matrix(pose))


def read_tum(path):
    """A TUM file's poses: [(time, 4x4)]."""
    out = []
    for line in pathlib.Path(path).read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            v = [float(x) for x in line.split()]
            out.append((v[0], matrix(v[1:4], v[4:8])))
    return out


def truth():
    """The sample scans' true poses (TUM: time, 4x4)."""
    return read_tum(SAMPLE / "poses_tum.txt")


def init_arg(pose=None):
    """--init of `pose` (4x4; default: the first sample scan's true pose)."""
    pose = truth()[0][1] if pose is None else pose
    return "--init=" + ",".join(repr(float(v)) for v in ndtcu.matrix_to_pose(pose))


def sample_scan(k):
    """Sample scan k's points (float32, (N, 3), sensor frame)."""
    return np.array(ndtcu.read_point_cloud(str(SAMPLE / "scans" / f"{k:06d}.pcd")).points)


def cloud_msg(points, stamp_ns, frame_id="velodyne", fields=("x", "y", "z"), point_step=None, row_step=None,
              data=None, width=None):
    """A sensor_msgs/PointCloud2 of float32 `points` (one row; a field per column of `fields`,
    padded to `point_step`); `row_step`, `data` and `width` override what the points make
    (to build a message that lies)."""
    from sensor_msgs.msg import PointField

    points = np.asarray(points, dtype=np.float32).reshape(-1, len(fields))
    step = point_step or 4 * len(fields)
    rows = np.zeros((len(points), step), dtype=np.uint8)
    rows[:, :4 * len(fields)] = points.view(np.uint8).reshape(len(points), 4 * len(fields))
    m = PointCloud2()
    m.header.stamp.sec, m.header.stamp.nanosec = divmod(int(stamp_ns), 1_000_000_000)
    m.header.frame_id = frame_id
    m.height = 1
    m.width = len(points) if width is None else width
    m.fields = [PointField(name=n, offset=4 * i, datatype=PointField.FLOAT32, count=1) for i, n in enumerate(fields)]
    m.is_bigendian = False
    m.point_step = step
    m.row_step = step * m.width if row_step is None else row_step
    m.data = rows.tobytes() if data is None else data
    m.is_dense = bool(np.isfinite(points).all())
    return m


def scan_stamp_ns(k):
    """Sample scan k's time stamp (ns): its line of poses_tum.txt."""
    return round(truth()[k][0] * 1e9)


# After this side lists the node's subscription, the node's side may not have matched this
# publisher yet, and its best-effort subscription drops what comes before (the player waits
# as long: ndtcu.ros2.play.DISCOVERY_SETTLE_S).
SETTLE_S = 0.5


def wait_for_subscriber(publisher, timeout=START_TIMEOUT_S):
    assert wait_until(lambda: publisher.get_subscription_count() > 0, timeout), publisher.topic_name
    time.sleep(SETTLE_S)
