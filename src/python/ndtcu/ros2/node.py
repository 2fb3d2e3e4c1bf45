"""The ROS 2 node: Autoware's ndt_scan_matcher's topics, services and diagnostics over
ndtcu.ScanMatcher (src/python/scan_matcher.cpp), which does each frame's work in C++ with
the GIL released. See docs/ros2.md for the topics and what each maps to.

Scans are taken newest first: the subscription's callback only hands the serialized
message to ScanMatcher.submit, a slot of one in C++ that replaces (and counts as dropped) a
message the frames' thread has not taken yet, so a scan arriving while another is aligned
waits at most one frame and nothing queues without bound. The frames' thread waits in
ScanMatcher.next_frame (in C++, without the GIL), which localizes a message as soon as it
comes, and publishes ndt_pose first, as the bytes C++ serialized.
"""
import threading
import time

import numpy as np
from geometry_msgs.msg import PoseStamped, PoseWithCovarianceStamped
from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy
from rclpy.qos_overriding_options import QoSOverridingOptions
from sensor_msgs.msg import PointCloud2
from std_msgs.msg import Float32, Int32
from std_srvs.srv import SetBool
from visualization_msgs.msg import Marker, MarkerArray
from diagnostic_msgs.msg import DiagnosticArray

from . import messages as msgs

# Autoware's validation.skipping_publish_num and critical_upper_bound_exe_time_ms defaults.
AUTOWARE_SKIPPING_PUBLISH_NUM = 5
AUTOWARE_CRITICAL_EXE_TIME_MS = 100.0

# The scan subscription: best effort (a sensor's publisher is usually best effort, which a
# reliable subscription would not hear), 10 deep, so that DDS keeps what arrives while the
# callback runs; the newest-wins slot behind it is what bounds the wait.
POINTS_QOS = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=10, reliability=ReliabilityPolicy.BEST_EFFORT)


# The frames' thread looks at its stop flag this often (s) while no scan comes.
FRAME_WAIT_S = 0.2


class Limits:
    """Autoware's validation limits, from the node's parameters."""

    def __init__(self, skipping_publish_num=AUTOWARE_SKIPPING_PUBLISH_NUM,
                 critical_exe_time_ms=AUTOWARE_CRITICAL_EXE_TIME_MS):
        self.skipping_publish_num = int(skipping_publish_num)
        self.critical_exe_time_ms = float(critical_exe_time_ms)


class ScanMatcherNode:
    """Subscriptions, publishers, the trigger service and the worker thread of one node."""

    def __init__(self, node, matcher, map_frame="map", limits=None):
        self.node = node
        self.matcher = matcher
        self.map_frame = map_frame
        self.limits = limits or Limits()
        self.log = node.get_logger()
        name = node.get_name()
        self.status_names = {k: f"{name}: {k}" for k in (
            "scan_matching_status", "initial_pose_subscriber_status", "regularization_pose_subscriber_status",
            "ndt_align_service_status", "trigger_node_service_status")}

        self.active = True
        self.refused = 0     # taken and refused (a bad message, no pose yet, ...)
        self.localized = 0   # localized (valid or not)
        self.published = 0   # ndt_pose published
        self.skipping = 0    # frames in a row not published (Autoware's skipping_publish_num)
        self.map_updates = 0  # tiled map updates swapped in (map_path a folder of tiles)
        # Autoware's ndt.regularization: whether regularization_pose_with_covariance is used.
        self.regularization = matcher.settings.regularization_scale_factor > 0.0
        self._stopping = False

        pub = node.create_publisher
        self.pub_pose = pub(PoseStamped, "ndt_pose", 10)
        self.pub_pose_cov = pub(PoseWithCovarianceStamped, "ndt_pose_with_covariance", 10)
        self.pub_aligned = pub(PointCloud2, "points_aligned", 10)
        self.pub_diag = pub(DiagnosticArray, "/diagnostics", 10)
        self.pub_tp = pub(Float32, "transform_probability", 10)
        self.pub_nvtl = pub(Float32, "nearest_voxel_transformation_likelihood", 10)
        self.pub_iterations = pub(Int32, "iteration_num", 10)
        self.pub_exe_time = pub(Float32, "exe_time_ms", 10)
        self.pub_initial = pub(PoseWithCovarianceStamped, "initial_pose_with_covariance", 10)
        self.pub_distance = pub(Float32, "initial_to_result_distance", 10)
        self.pub_marker = pub(MarkerArray, "ndt_marker", 10)

        self._worker = threading.Thread(target=self._run, name="ndt_scan_matcher frames", daemon=True)
        self._worker.start()
        sub = node.create_subscription
        self.subscriptions = [
            # Its reliability and depth can be overridden as ROS 2 parameters
            # (qos_overrides./points_raw.subscription.reliability:=reliable).
            sub(PointCloud2, "points_raw", self._on_points, POINTS_QOS, raw=True,
                qos_overriding_options=QoSOverridingOptions.with_default_policies()),
            sub(PoseWithCovarianceStamped, "ekf_pose_with_covariance", self._on_ekf, 100),
            sub(PoseWithCovarianceStamped, "regularization_pose_with_covariance", self._on_regularization, 10),
            sub(PoseWithCovarianceStamped, "initialpose", self._on_initialpose, 10),
        ]
        self.service = node.create_service(SetBool, "trigger_node_srv", self._on_trigger)

    # --- the executor's callbacks: short, never waiting for a frame

    def _on_points(self, raw):
        self.matcher.submit(raw)

    def _pose_input(self, msg, topic, status, add, taken, values=(), activated=None):
        """An EKF or regularization pose: in the map frame, checked and buffered. Each gets its
        status, as in Autoware's node: OK (`taken`) when buffered, so that a status after a
        refused pose clears the WARN; a WARN and a log line when refused. `activated` (the EKF
        pose's only, as in Autoware's node): False drops the pose with a WARN and no log line,
        as Autoware's callback does while the node is deactivated."""
        stamp = [("topic_time_stamp", msgs.stamp_ns(msg.header.stamp))]
        if activated is not None:
            stamp.append(("is_activated", activated))
            if not activated:
                self._diagnose(status, msgs.WARN, "Node is not activated.", stamp)
                return
        problem = None
        expected_frame = msg.header.frame_id == self.map_frame
        if not expected_frame:
            problem = (f"{topic}: frame_id '{msg.header.frame_id}' is not the map frame '{self.map_frame}'; the pose "
                       "is not used")
        else:
            try:
                add(msgs.stamp_ns(msg.header.stamp), msgs.xyzq(msg.pose.pose), msgs.covariance(msg.pose.covariance))
            except Exception as e:  # ndtcu.Error naming the topic: not a pose, a stamp going backwards
                problem = str(e)
        values = [*stamp, ("frame_id", msg.header.frame_id),
                  ("is_expected_frame_id", expected_frame), ("is_ok", problem is None), *values]
        if problem:
            self.log.warning(problem)
            self._diagnose(status, msgs.WARN, problem, values)
        else:
            self._diagnose(status, msgs.OK, taken, values)

    def _on_ekf(self, msg):
        self._pose_input(msg, "ekf_pose_with_covariance", "initial_pose_subscriber_status", self.matcher.add_prediction,
                         "taken: the prediction of the scans about its stamp", activated=self.active)

    def _on_regularization(self, msg):
        taken = ("taken: the prediction and regularization centre of the scans about its stamp that no EKF pose covers"
                 if self.regularization else
                 "taken, not used: the regularization is off (ndt.regularization.enable in the parameter file)")
        self._pose_input(msg, "regularization_pose_with_covariance", "regularization_pose_subscriber_status",
                         self.matcher.add_regularization, taken, [("is_regularization_enabled", self.regularization)])

    def _on_initialpose(self, msg):
        problem = None
        if msg.header.frame_id != self.map_frame:
            problem = f"initialpose: frame_id '{msg.header.frame_id}' is not the map frame '{self.map_frame}'; not used"
        else:
            try:
                self.matcher.request_initial_pose(msgs.xyzq(msg.pose.pose), msgs.covariance(msg.pose.covariance))
            except Exception as e:  # ndtcu.Error naming initialpose
                problem = str(e)
        values = [("topic_time_stamp", msgs.stamp_ns(msg.header.stamp)), ("is_succeed_service", problem is None)]
        if problem:
            self.log.warning(problem)
            self._diagnose("ndt_align_service_status", msgs.WARN, problem, values)
        else:
            self.log.info("initialpose: taken; the next scan starts from it (a search about it, as its covariance "
                          "or --init-radius says)")
            self._diagnose("ndt_align_service_status", msgs.OK, "initial pose taken for the next scan", values)

    def _on_trigger(self, request, response):
        self.active = bool(request.data)
        self.matcher.set_active(self.active)
        response.success = True
        response.message = "activated" if self.active else "deactivated"
        self.log.info(f"trigger_node_srv: {response.message}")
        self._diagnose("trigger_node_service_status", msgs.OK, response.message,
                       [("is_activated", self.active), ("is_succeed_service", True)])
        return response

    # --- the worker

    def _run(self):
        while not self._stopping:
            try:
                want_aligned = self.pub_aligned.get_subscription_count() > 0
                f = self.matcher.next_frame(want_aligned, FRAME_WAIT_S)
                if f is not None:
                    self._frame(f)
            except Exception as e:  # the node goes on with the next scan
                self.log.error(f"points_raw: frame failed: {type(e).__name__}: {e}")

    def stop(self):
        self._stopping = True
        self.matcher.stop()
        self._worker.join(timeout=30.0)

    @property
    def received(self):
        """points_raw messages heard."""
        return self.matcher.received

    @property
    def dropped(self):
        """Messages replaced before the frames' thread took them (newest wins)."""
        return self.matcher.dropped

    def _frame(self, f):
        # ndt_pose first (None unless the frame is valid): the rest is published after it.
        pose = f.pose_msg
        if pose is not None:
            self.pub_pose.publish(pose)
        t_out = time.monotonic_ns()
        if f.refused_as == "not_activated":
            self._diagnose("scan_matching_status", msgs.WARN, f.refused,
                           [("is_activated", False), ("received_scan_count", self.received),
                            ("dropped_scan_count", self.dropped)])
            return
        if f.refused:
            self._refused(f)
            return
        r = f.result
        valid = r.valid
        self.localized += 1
        self.map_updates += int(f.map_swaps)
        stamp = msgs.time_msg(f.stamp_ns)
        if valid:
            self.published += 1
            self.skipping = 0
            self.pub_pose_cov.publish(f.pose_with_covariance_msg)
            aligned = f.aligned
            if aligned is not None:
                self.pub_aligned.publish(aligned)
        else:
            self.skipping += 1
            self.log.warning(f"points_raw: scan at {f.stamp_ns / 1e9:.9f} s not published: {r.status} "
                             f"({r.decided_by}, NVTL {r.alignment.nvtl:.3f})")
        a = r.alignment
        # Message in to pose out; the library's share of it; and what Autoware calls the
        # execution time (its callback's, from the scan's arrival to the pose: the same span).
        latency_ms = (t_out - f.received_ns) / 1e6
        library_ms = f.preprocess_ms + f.localize_ms
        exe_ms = latency_ms
        self.pub_tp.publish(Float32(data=float(a.tp)))
        self.pub_nvtl.publish(Float32(data=float(a.nvtl)))
        self.pub_iterations.publish(Int32(data=int(a.iterations)))
        self.pub_exe_time.publish(Float32(data=float(exe_ms)))
        distance = float(np.linalg.norm(f.xyzq[:3] - f.prediction_xyzq[:3]))
        if self.pub_initial.get_subscription_count() > 0:
            self.pub_initial.publish(msgs.pose_with_covariance(f.prediction_xyzq, f.prediction_covariance, stamp,
                                                               self.map_frame))
        self.pub_distance.publish(Float32(data=distance))
        if self.pub_marker.get_subscription_count() > 0:
            self.pub_marker.publish(self._markers(f.trace_xyzq, stamp))

        level, why = msgs.OK, []
        if not valid:
            level = msgs.WARN
            why.append(f"pose not published: {r.status} ({r.decided_by})")
        if self.skipping > self.limits.skipping_publish_num:
            level = msgs.ERROR
            why.append(f"{self.skipping} scans in a row not published (validation.skipping_publish_num "
                       f"{self.limits.skipping_publish_num})")
        if exe_ms > self.limits.critical_exe_time_ms:
            level = max(level, msgs.WARN)
            why.append(f"execution time {exe_ms:.1f} ms over {self.limits.critical_exe_time_ms:g} ms")
        loc = a.localizability
        condition = loc.get("condition")
        self._diagnose("scan_matching_status", level, "; ".join(why) or "OK", [
            ("topic_time_stamp", int(f.stamp_ns)),
            ("sensor_points_size", f.points_in_message),
            ("sensor_points_delay_time_sec", self.node.get_clock().now().nanoseconds / 1e9 - f.stamp_ns / 1e9),
            ("is_succeed_transform_sensor_points", True),
            ("is_activated", True),
            ("is_set_map_points", True),
            ("is_set_sensor_points", True),
            ("is_succeed_interpolate_initial_pose", f.prediction_source == "ekf"),
            ("iteration_num", int(a.iterations)),
            ("local_optimal_solution_oscillation_num", int(a.oscillation_count)),
            ("transform_probability", float(a.tp)),
            ("nearest_voxel_transformation_likelihood", float(a.nvtl)),
            ("is_converged", bool(valid)),
            ("skipping_publish_num", self.skipping),
            ("distance_initial_to_result", distance),
            ("execution_time", exe_ms),
            # ndtcu's own: the frame check's decision and what it saw
            ("frame_status", r.status),
            ("frame_check", r.decided_by),
            ("frame_stage", r.stage),
            ("attempts", int(r.attempts)),
            ("prediction_source", f.prediction_source),
            ("localizability_condition", float("inf") if condition is None else float(condition)),
            ("localizability_weak_directions", int(loc.get("weak", 0))),
            ("degenerate_directions", int(r.degenerate_directions)),
            ("points_used", int(r.points_used)),
            ("non_finite_points", int(f.non_finite)),
            ("received_scan_count", self.received),
            ("dropped_scan_count", self.dropped),
            ("refused_scan_count", self.refused),
            ("published_pose_count", self.published),
            ("map_update_count", self.map_updates),
            ("decode_time_ms", f.decode_ms),
            ("preprocess_time_ms", f.preprocess_ms),
            ("align_time_ms", float(r.align_ms)),
            ("covariance_time_ms", f.covariance_ms),
            ("localize_time_ms", f.localize_ms),
            ("node_latency_ms", latency_ms),
            ("node_overhead_ms", latency_ms - library_ms),
            ("slot_wait_ms", (f.taken_ns - f.received_ns) / 1e6),
            ("publish_time_ms", (t_out - f.done_ns) / 1e6),
        ])

    def _refused(self, f):
        self.refused += 1
        self.log.warning(f.refused)
        self._diagnose("scan_matching_status", msgs.WARN, f.refused, [
            ("topic_time_stamp", int(f.stamp_ns)),
            ("sensor_points_size", f.points_in_message),
            ("is_succeed_transform_sensor_points", f.refused_as != "frame_id"),
            ("is_activated", True),
            ("is_set_map_points", bool(self.matcher.map_loaded)),
            ("is_set_sensor_points", f.refused_as not in ("invalid_message", "empty")),
            ("refused", f.refused_as),
            ("non_finite_points", int(f.non_finite)),
            ("skipping_publish_num", self.skipping),
            ("received_scan_count", self.received),
            ("dropped_scan_count", self.dropped),
            ("refused_scan_count", self.refused),
            ("published_pose_count", self.published),
        ])

    def _diagnose(self, status, level, message, values):
        now = self.node.get_clock().now().to_msg()
        self.pub_diag.publish(msgs.diagnostic_array(now, [
            msgs.status(self.status_names[status], level, message, values)]))

    def _markers(self, trace, stamp):
        """ndt_marker: an arrow per iteration's pose (Autoware's debug markers)."""
        out = MarkerArray()
        for i, row in enumerate(trace):
            m = Marker()
            m.header.stamp = stamp
            m.header.frame_id = self.map_frame
            m.ns = "result_pose_matrix_array"
            m.id = i
            m.type = Marker.ARROW
            m.action = Marker.ADD
            m.pose = msgs.pose_msg(row)
            m.scale.x, m.scale.y, m.scale.z = 0.3, 0.1, 0.1
            m.color.a, m.color.r, m.color.g, m.color.b = 0.999, float(i) / max(1, len(trace)), 0.7, 1.0
            out.markers.append(m)
        return out
