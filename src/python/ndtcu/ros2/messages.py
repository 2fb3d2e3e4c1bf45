"""Messages of the node: poses to and from numpy, stamps, and Autoware's diagnostics.

Imported after `environment.prepare()` (it imports the ROS message packages).
"""
import numpy as np
from builtin_interfaces.msg import Time
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from geometry_msgs.msg import Pose, PoseStamped, PoseWithCovarianceStamped

# Autoware's ndt_scan_matcher names its statuses "<node name>: <what>" with hardware_id "node".
HARDWARE_ID = "node"
OK, WARN, ERROR = DiagnosticStatus.OK, DiagnosticStatus.WARN, DiagnosticStatus.ERROR


def stamp_ns(stamp):
    """A builtin_interfaces/Time in nanoseconds."""
    return int(stamp.sec) * 1_000_000_000 + int(stamp.nanosec)


def time_msg(ns):
    """Nanoseconds as a builtin_interfaces/Time."""
    sec, nanosec = divmod(int(ns), 1_000_000_000)
    return Time(sec=sec, nanosec=nanosec)


def xyzq(pose):
    """A geometry_msgs/Pose as [x y z qx qy qz qw] (float64)."""
    p, q = pose.position, pose.orientation
    return np.array([p.x, p.y, p.z, q.x, q.y, q.z, q.w])


def covariance(values):
    """A message's row-major 36 covariance entries as a 6x6 array."""
    return np.asarray(values, dtype=np.float64).reshape(6, 6)


def pose_msg(v):
    """[x y z qx qy qz qw] as a geometry_msgs/Pose."""
    m = Pose()
    m.position.x, m.position.y, m.position.z = float(v[0]), float(v[1]), float(v[2])
    m.orientation.x, m.orientation.y, m.orientation.z, m.orientation.w = (float(v[3]), float(v[4]), float(v[5]),
                                                                         float(v[6]))
    return m


def pose_stamped(v, stamp, frame_id):
    m = PoseStamped()
    m.header.stamp = stamp
    m.header.frame_id = frame_id
    m.pose = pose_msg(v)
    return m


def pose_with_covariance(v, cov, stamp, frame_id):
    m = PoseWithCovarianceStamped()
    m.header.stamp = stamp
    m.header.frame_id = frame_id
    m.pose.pose = pose_msg(v)
    m.pose.covariance = np.asarray(cov, dtype=np.float64).reshape(36)
    return m


def value_text(v):
    """A diagnostic value as Autoware writes it: booleans lower-case, floats as they print."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return repr(v)
    return str(v)


def status(name, level, message, values):
    """One DiagnosticStatus: `values` a list of (key, value) pairs."""
    s = DiagnosticStatus()
    s.level = level
    s.name = name
    s.message = message
    s.hardware_id = HARDWARE_ID
    s.values = [KeyValue(key=k, value=value_text(v)) for k, v in values]
    return s


def diagnostic_array(stamp, statuses):
    a = DiagnosticArray()
    a.header.stamp = stamp
    a.status = list(statuses)
    return a
