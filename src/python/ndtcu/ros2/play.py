"""`ndtcu_ros2_play BAG` (also `python -m ndtcu.ros2.play`): publishes a bag's scans to a
ROS 2 graph, for trying `ndtcu_scan_matcher` on a bag without a ROS distribution.

    ndtcu_ros2_play BAG [--topic T] [--points-topic points_raw] [--rate R] [--count N]
                        [--initialpose x,y,z,roll,pitch,yaw] [--wait S] [--answer-timeout S]

The bag's PointCloud2 topic (--topic, or its only one) goes out on --points-topic, and its
nav_msgs/Odometry and sensor_msgs/Imu topics under their own names, in record-time order.
A ROS 2 bag's messages are published as the bag holds them (their serialized bytes: no
Python message is built); a ROS 1 bag's scans are decoded and encoded again, its odometry
read, its IMU left out. --rate R > 0 paces the messages by their record times, R times as
fast; --rate 0 publishes each scan when the node has answered the one before (its
scan_matching_status diagnostic for that stamp), or after --answer-timeout. Exit codes: 0
done, 1 an error, 2 a usage error, 77 no rclpy.
"""
import argparse
import struct
import sys
import threading
import time

from . import environment

POINT_CLOUD2_TYPES = ("sensor_msgs/msg/PointCloud2", "sensor_msgs/PointCloud2")
ODOMETRY_TYPES = ("nav_msgs/msg/Odometry", "nav_msgs/Odometry")
IMU_TYPES = ("sensor_msgs/msg/Imu", "sensor_msgs/Imu")
# Discovery is not symmetric: this side can list the node's subscription before the node's
# side has matched this publisher, and a best-effort subscription (a sensor topic's) drops
# what arrives before it has (1 run in 6 lost its first scan without this wait, s).
DISCOVERY_SETTLE_S = 0.5
# What RViz's "2D Pose Estimate" sends: 0.5 m in x and y, about 15 deg in yaw.
RVIZ_INITIALPOSE_COVARIANCE = (0.25, 0.25, 0.0, 0.0, 0.0, 0.06853891945200942)


def cdr_stamp_ns(raw):
    """The header stamp of a serialized ROS 2 message (CDR: the 4-byte encapsulation header,
    then the stamp's int32 sec and uint32 nanosec, in the byte order it names)."""
    order = "<" if raw[1] & 1 else ">"
    sec, nanosec = struct.unpack_from(order + "iI", raw, 4)
    return sec * 1_000_000_000 + nanosec


def quaternion_xyzw(rotation):
    """A rotation matrix's unit quaternion [x y z w] (Shepperd's method)."""
    import numpy as np

    r = np.asarray(rotation, dtype=np.float64)
    t = np.trace(r)
    if t > 0.0:
        s = 2.0 * np.sqrt(t + 1.0)
        q = [(r[2, 1] - r[1, 2]) / s, (r[0, 2] - r[2, 0]) / s, (r[1, 0] - r[0, 1]) / s, 0.25 * s]
    else:
        i = int(np.argmax(np.diag(r)))
        j, k = (i + 1) % 3, (i + 2) % 3
        s = 2.0 * np.sqrt(1.0 + r[i, i] - r[j, j] - r[k, k])
        q = [0.0, 0.0, 0.0, (r[k, j] - r[j, k]) / s]
        q[i] = 0.25 * s
        q[j] = (r[j, i] + r[i, j]) / s
        q[k] = (r[k, i] + r[i, k]) / s
    q = np.array(q)
    return q / np.linalg.norm(q)


def parse_args(argv):
    ap = argparse.ArgumentParser(prog="ndtcu_ros2_play", description="Publish a bag's scans (and odometry, IMU) "
                                 "to ROS 2, for ndtcu_scan_matcher (docs/ros2.md).")
    ap.add_argument("bag", help="a rosbag: .bag, .mcap, .db3, or a ROS 2 bag folder")
    ap.add_argument("--topic", default="", help="the bag's PointCloud2 topic (default: its only one)")
    ap.add_argument("--points-topic", default="points_raw", help="where the scans go (default: points_raw)")
    ap.add_argument("--count", type=int, default=0, help="publish the first N scans only (default: all)")
    ap.add_argument("--rate", type=float, default=1.0,
                    help="R > 0: record-time pacing R times as fast; 0: each scan once the node answered the last "
                         "(default 1)")
    ap.add_argument("--initialpose", default="", help="publish this pose (x,y,z,roll,pitch,yaw; m, rad; map frame) "
                    "on initialpose before the first scan, with RViz's covariance")
    ap.add_argument("--wait", type=float, default=10.0,
                    help="wait at most this long (s) for a subscriber of the scans before the first (default 10)")
    ap.add_argument("--answer-timeout", type=float, default=5.0,
                    help="with --rate 0: go on after this long (s) without an answer (default 5)")
    ap.add_argument("--quiet", action="store_true", help="no summary on stderr")
    args = ap.parse_args(argv)
    if not args.rate >= 0.0:
        ap.error("--rate must be >= 0")
    if args.count < 0:
        ap.error("--count must be >= 0")
    if args.initialpose:
        try:
            values = [float(v) for v in args.initialpose.split(",")]
        except ValueError:
            values = []
        if len(values) != 6:
            ap.error("--initialpose: give x,y,z,roll,pitch,yaw")
        args.initialpose = values
    return args


class Answers:
    """The stamps the node answered (its scan_matching_status diagnostics)."""

    def __init__(self):
        self._stamps = set()
        self._cond = threading.Condition()

    def on_diagnostics(self, msg):
        for s in msg.status:
            if not s.name.endswith(": scan_matching_status"):
                continue
            for kv in s.values:
                if kv.key == "topic_time_stamp":
                    with self._cond:
                        self._stamps.add(int(kv.value))  # nanoseconds, as Autoware's node writes it
                        self._cond.notify_all()

    def wait(self, stamp_ns, timeout):
        key = int(stamp_ns)
        deadline = time.monotonic() + timeout
        with self._cond:
            while key not in self._stamps:
                left = deadline - time.monotonic()
                if left <= 0.0:
                    return False
                self._cond.wait(left)
            return True


def spin(executor):
    """The executor's loop on a thread of its own, until rclpy shuts down."""
    from rclpy.executors import ExternalShutdownException

    try:
        executor.spin()
    except ExternalShutdownException:
        pass


def main(argv=None):
    argv = list(sys.argv if argv is None else argv)
    if not environment.prepare():
        print("ndtcu_ros2_play: " + environment.missing_message(), file=sys.stderr)
        return 77
    import numpy as np
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.qos import QoSProfile
    from rclpy.utilities import remove_ros_args
    from diagnostic_msgs.msg import DiagnosticArray
    from geometry_msgs.msg import PoseWithCovarianceStamped
    from nav_msgs.msg import Odometry
    from sensor_msgs.msg import Imu, PointCloud2

    from .. import _ndtcu
    from . import messages as msgs

    args = parse_args(remove_ros_args(argv)[1:])
    try:
        bag = _ndtcu.BagReader(args.bag)
        scans = bag.point_cloud_topic(args.topic)
    except _ndtcu.Error as e:
        print(f"ndtcu_ros2_play: {e}", file=sys.stderr)
        return 1
    topics = {t["name"]: t for t in bag.topics}

    rclpy.init(args=argv)
    node = rclpy.create_node("ndtcu_ros2_play")
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    spinner = threading.Thread(target=spin, args=(executor,), daemon=True)
    try:
        qos = QoSProfile(depth=10)
        timeline = []  # (record time ns, order, publisher, topic, index, kind)
        points_pub = node.create_publisher(PointCloud2, args.points_topic, qos)
        scan_times = bag.record_times_ns(scans)
        if args.count:
            scan_times = scan_times[:args.count]
        for k, t in enumerate(scan_times):
            timeline.append((t, 0, points_pub, scans, k, "scan"))
        end = scan_times[-1] if scan_times else 0
        skipped = []
        for name, t in topics.items():
            kind = "odometry" if t["type"] in ODOMETRY_TYPES else "imu" if t["type"] in IMU_TYPES else None
            if kind is None or not isinstance(name, str):
                continue
            if kind == "imu" and t["encoding"] != "cdr":
                skipped.append(name)
                continue
            pub = node.create_publisher(Odometry if kind == "odometry" else Imu, name, qos)
            for k, stamp in enumerate(bag.record_times_ns(name)):
                if args.count and stamp > end:
                    break
                timeline.append((stamp, 1, pub, name, k, kind))
        timeline.sort(key=lambda e: (e[0], e[1], e[4]))
        if skipped and not args.quiet:
            print(f"ndtcu_ros2_play: {', '.join(skipped)}: a ROS 1 bag's IMU is not published", file=sys.stderr)

        answers = Answers()
        if args.rate == 0.0:
            node.create_subscription(DiagnosticArray, "/diagnostics", answers.on_diagnostics, 100)
        initial_pub = node.create_publisher(PoseWithCovarianceStamped, "initialpose", qos) if args.initialpose else None
        spinner.start()

        deadline = time.monotonic() + args.wait
        while points_pub.get_subscription_count() == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        if points_pub.get_subscription_count() == 0 and args.wait > 0 and not args.quiet:
            print(f"ndtcu_ros2_play: no subscriber of {points_pub.topic_name} after {args.wait:g} s; publishing "
                  "anyway", file=sys.stderr)
        elif args.wait > 0:
            time.sleep(DISCOVERY_SETTLE_S)
        if initial_pub is not None:
            transform = _ndtcu.pose_to_matrix(np.asarray(args.initialpose, dtype=np.float64))
            v = list(transform[:3, 3]) + list(quaternion_xyzw(transform[:3, :3]))
            cov = [0.0] * 36
            for i, c in enumerate(RVIZ_INITIALPOSE_COVARIANCE):
                cov[7 * i] = c
            while initial_pub.get_subscription_count() == 0 and time.monotonic() < deadline:
                time.sleep(0.02)
            initial_pub.publish(msgs.pose_with_covariance(v, cov, node.get_clock().now().to_msg(), "map"))

        start, t0 = time.monotonic(), timeline[0][0] if timeline else 0
        published = answered = others = 0
        for t, _, pub, topic, k, kind in timeline:
            if args.rate > 0.0:
                delay = start + (t - t0) / 1e9 / args.rate - time.monotonic()
                if delay > 0.0:
                    time.sleep(delay)
            if kind == "scan":
                raw = bag.read_point_cloud2_cdr(topic, k)
                pub.publish(raw)
                published += 1
                if args.rate == 0.0:
                    answered += answers.wait(cdr_stamp_ns(raw), args.answer_timeout)
            elif kind == "odometry" and topics[topic]["encoding"] != "cdr":
                o = bag.read_odometry(topic, k)
                m = Odometry()
                m.header.stamp = msgs.time_msg(o["stamp_ns"])
                m.header.frame_id = o["frame_id"]
                m.child_frame_id = o["child_frame_id"]
                pose = o["pose"]
                m.pose.pose = msgs.pose_msg(list(pose[:3, 3]) + list(quaternion_xyzw(pose[:3, :3])))
                m.pose.covariance = o["covariance"].reshape(36)
                pub.publish(m)
                others += 1
            else:
                pub.publish(bag.read_raw(topic, k))
                others += 1
        time.sleep(0.3)  # what is in flight reaches the subscribers before the publishers go
        if not args.quiet:
            answer = f", {answered} answered" if args.rate == 0.0 else ""
            print(f"ndtcu_ros2_play: {published} scans{answer} and {others} other messages in "
                  f"{time.monotonic() - start:.2f} s", file=sys.stderr)
        return 0
    except KeyboardInterrupt:
        return 130
    finally:
        executor.shutdown(timeout_sec=1.0)
        if spinner.is_alive():
            spinner.join(timeout=2.0)
        node.destroy_node()
        if rclpy.ok():
            rclpy.shutdown()


if __name__ == "__main__":
    sys.exit(main())
