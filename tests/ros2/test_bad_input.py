"""Bad input to the node, one message at a time: each gets a diagnostic (WARN) and a log
line naming what is wrong, the node keeps running, and nothing wrong is published: the
only poses out are those of the good scans, each within 5 cm of the truth."""
import numpy as np
from geometry_msgs.msg import PoseWithCovarianceStamped
from std_srvs.srv import SetBool

from ndtcu.ros2.play import quaternion_xyzw

from conftest import (SCAN_MATCHING, cloud_msg, init_arg, pose_matrix, sample_scan, scan_stamp_ns, start_node,
                      truth, wait_until)

TRUTH_TOLERANCE_M = 0.05
ANSWER_TIMEOUT_S = 15.0


class Session:
    """The node and the listener, with each input's answer awaited."""

    def __init__(self, listener, node):
        self.listener = listener
        self.node = node

    def answer(self, publisher, msg, status=SCAN_MATCHING):
        """Publishes `msg` and returns the next status `status` it brings: (level, message, values)."""
        before = len(self.listener.statuses(status))
        publisher.publish(msg)
        assert wait_until(lambda: len(self.listener.statuses(status)) > before, ANSWER_TIMEOUT_S), \
            f"no {status} for the message:\n{self.node.log()}"
        assert self.node.proc.poll() is None, self.node.log()
        return self.listener.statuses(status)[before]

    def refused(self, msg, kind, text):
        level, message, values = self.answer(self.listener.points, msg)
        assert level == b"\x01" and values["refused"] == kind, (message, values)
        assert text in message, message
        assert wait_until(lambda: text in self.node.log(), 5.0), f"no log line with {text!r}:\n{self.node.log()}"
        return values

    def localized(self, msg):
        level, message, values = self.answer(self.listener.points, msg)
        assert level == b"\x00" and values["is_converged"] == "true", (message, values)
        return values


def pose_msg(frame_id, stamp_ns, position, quaternion=(0.0, 0.0, 0.0, 1.0)):
    m = PoseWithCovarianceStamped()
    m.header.frame_id = frame_id
    m.header.stamp.sec, m.header.stamp.nanosec = divmod(stamp_ns, 1_000_000_000)
    m.pose.pose.position.x, m.pose.pose.position.y, m.pose.pose.position.z = position
    o = m.pose.pose.orientation
    o.x, o.y, o.z, o.w = quaternion
    return m


def test_bad_input(listener, tmp_path):
    node = start_node(listener, tmp_path, [init_arg()])
    s = Session(listener, node)
    try:
        scan0, scan1, scan3 = sample_scan(0), sample_scan(1), sample_scan(3)
        t = [scan_stamp_ns(k) for k in range(4)]
        values = s.localized(cloud_msg(scan0, t[0]))
        # The scan's stamp in nanoseconds, as Autoware's node writes topic_time_stamp.
        assert values["topic_time_stamp"] == str(t[0]), values

        # Messages whose layout lies: each refused by the decoder, naming the field.
        short_row = cloud_msg(scan1, t[1])
        short_row.row_step = short_row.point_step * short_row.width - 4
        s.refused(short_row, "invalid_message", "row_step")
        narrow = cloud_msg(scan1, t[1])
        narrow.point_step, narrow.row_step = 8, 8 * narrow.width
        s.refused(narrow, "invalid_message", "outside point_step")
        s.refused(cloud_msg(scan1, t[1], fields=("a", "b", "c")), "invalid_message", "no field 'x'")
        truncated = cloud_msg(scan1, t[1])
        truncated.data = truncated.data[:len(truncated.data) // 2]
        s.refused(truncated, "invalid_message", "data holds")
        # No point at all, and only NaN points.
        s.refused(cloud_msg(np.zeros((0, 3)), t[1]), "empty", "no finite point")
        s.refused(cloud_msg(np.full((500, 3), np.nan), t[1]), "empty", "no finite point")
        # Another frame than the sensor's (the first scan's).
        s.refused(cloud_msg(scan1, t[1], frame_id="base_link"), "frame_id", "frame_id 'base_link'")

        # NaN points among good ones: dropped and counted, the scan localized.
        with_nan = scan1.copy()
        with_nan[::3] = np.nan
        values = s.localized(cloud_msg(with_nan, t[1]))
        assert int(values["non_finite_points"]) == len(range(0, len(scan1), 3))

        # A stamp going backwards, and one repeated.
        s.refused(cloud_msg(scan0, t[0] + 1000), "stamp", "not after the last scan's")
        s.refused(cloud_msg(scan1, t[1]), "stamp", "not after the last scan's")

        # Poses in another frame than the map's, or that are no pose.
        ekf_status = "ndt_scan_matcher: initial_pose_subscriber_status"
        level, message, values = s.answer(listener.ekf, pose_msg("odom", t[2], (0.0, 0.0, 0.0)), ekf_status)
        assert level == b"\x01" and "frame_id 'odom'" in message
        assert values["topic_time_stamp"] == str(t[2]) and values["is_activated"] == "true", values
        level, message, _ = s.answer(listener.ekf, pose_msg("map", t[2], (0.0, 0.0, 0.0), (0.0, 0.0, 0.0, 2.0)),
                                     ekf_status)
        assert level == b"\x01" and "quaternion has length 2" in message
        level, message, _ = s.answer(listener.ekf, pose_msg("map", t[2], (np.nan, 0.0, 0.0)), ekf_status)
        assert level == b"\x01" and "not finite" in message
        align_status = "ndt_scan_matcher: ndt_align_service_status"
        level, message, values = s.answer(listener.initialpose, pose_msg("odom", t[2], (0.0, 0.0, 0.0)),
                                          align_status)
        assert level == b"\x01" and "frame_id 'odom'" in message and values["topic_time_stamp"] == str(t[2])
        assert wait_until(lambda: "initialpose: frame_id 'odom'" in node.log(), 5.0), node.log()

        # trigger_node_srv: deactivated, a scan is not localized; activated, the next is.
        client = listener.node.create_client(SetBool, "trigger_node_srv")
        assert client.wait_for_service(timeout_sec=10.0)
        for active in (False,):
            future = client.call_async(SetBool.Request(data=active))
            assert wait_until(future.done, 10.0) and future.result().success
        level, message, values = s.answer(listener.points, cloud_msg(sample_scan(2), t[2]))
        assert level == b"\x01" and values["is_activated"] == "false", message
        # An EKF pose while deactivated is dropped, as Autoware's node drops it: a WARN
        # "Node is not activated." with is_activated false, and the next scan is not predicted
        # from it (this one would predict scan 3: its true pose at its stamp).
        p3 = truth()[3][1]
        level, message, values = s.answer(listener.ekf, pose_msg("map", t[3], p3[:3, 3], quaternion_xyzw(p3[:3, :3])),
                                          ekf_status)
        assert (level, message) == (b"\x01", "Node is not activated."), (message, values)
        assert values == {"topic_time_stamp": str(t[3]), "is_activated": "false"}, values
        future = client.call_async(SetBool.Request(data=True))
        assert wait_until(future.done, 10.0) and future.result().success
        values = s.localized(cloud_msg(scan3, t[3]))
        assert values["prediction_source"] == "motion model", values
        assert node.proc.poll() is None
    finally:
        rc = node.stop()
    assert rc == 0, node.log()

    # What was published: the poses of scans 0, 1 and 3, right.
    poses = listener.messages("ndt_pose")
    stamps = [p.header.stamp.sec * 1_000_000_000 + p.header.stamp.nanosec for p in poses]
    assert stamps == [t[0], t[1], t[3]], node.log()
    true_poses = truth()
    for k, p in zip((0, 1, 3), poses):
        assert np.linalg.norm(pose_matrix(p.pose)[:3, 3] - true_poses[k][1][:3, 3]) < TRUTH_TOLERANCE_M
    assert len(listener.messages("ndt_pose_with_covariance")) == 3
