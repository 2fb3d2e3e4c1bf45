"""The node and the player in processes of their own, a sample bag played through DDS:
every frame's ndt_pose is `ndtcu localize`'s on the same bag with the same settings (the
same TUM line: equal to the micrometre and the nanoradian, which only the same arithmetic
gives), within 5 cm of the true pose, and each frame has its diagnostic, its pose with
covariance and its debug scalars."""
import time

import numpy as np
import pytest
from geometry_msgs.msg import PoseWithCovarianceStamped

from conftest import (SCAN_MATCHING, Process, init_arg, localize_cli, pose_matrix, start_node, tum_line, truth,
                      wait_until)

import ndtcu
from ndtcu.ros2.play import quaternion_xyzw

# The bags of the rosbag_bags fixture the node reads: big-endian CDR with big-endian point
# data and the fields out of order (raw bytes to the node); an organized cloud with a NaN
# after every point and row padding (raw bytes); and a ROS 1 bag, whose scans the player
# decodes and encodes again.
BAGS = ["sample_mcap", "sample_mcap_zstd", "sample_ros1_lz4"]
FRAMES = 10
# A pose is right within this of the truth (m): the bound. The sample's scans sit on
# the map to within their 2 cm range noise and the 0.25 m map voxels.
TRUTH_TOLERANCE_M = 0.05


@pytest.mark.parametrize("bag_name", BAGS)
def test_poses_are_localize_poses(listener, tmp_path, cli, bags, bag_name):
    bag = bags[bag_name]["path"]
    expected, frames = localize_cli(cli, bag, tmp_path / "cli", init_arg())
    assert len(expected) == FRAMES
    node = start_node(listener, tmp_path, [init_arg()])
    try:
        play = Process("ndtcu.ros2.play", [bag, "--rate", "0", "--wait", "20"], tmp_path / "play.log")
        assert play.wait(120) == 0, play.log()
        assert f"{FRAMES} scans, {FRAMES} answered" in play.log(), play.log()
        assert wait_until(lambda: len(listener.messages("ndt_pose_with_covariance")) >= FRAMES, 10)
    finally:
        rc = node.stop()
    log = node.log()
    assert rc == 0, log

    poses = listener.messages("ndt_pose")
    assert len(poses) == FRAMES, log
    true_poses = truth()
    for k, p in enumerate(poses):
        assert p.header.frame_id == "map"
        line = tum_line(p.header.stamp, p.pose)
        assert line == expected[line.split()[0]], f"frame {k}: node {line} against localize"
        t, reference = true_poses[k]
        assert abs(p.header.stamp.sec + p.header.stamp.nanosec * 1e-9 - t) < 1e-9
        assert np.linalg.norm(pose_matrix(p.pose)[:3, 3] - reference[:3, 3]) < TRUTH_TOLERANCE_M

    # One scan_matching_status per frame, with localize's numbers.
    statuses = listener.statuses(SCAN_MATCHING)
    assert len(statuses) == FRAMES, statuses
    for (level, message, values), row, p in zip(statuses, frames, poses):
        assert level == b"\x00", message
        # The scan's stamp in nanoseconds, as Autoware's node writes topic_time_stamp.
        assert values["topic_time_stamp"] == str(p.header.stamp.sec * 1_000_000_000 + p.header.stamp.nanosec)
        assert values["is_converged"] == "true" and values["frame_check"] == "passed"
        assert int(values["iteration_num"]) == int(row["iterations"])
        assert f"{float(values['nearest_voxel_transformation_likelihood']):.6f}" == row["nvtl"]
        assert f"{float(values['transform_probability']):.6f}" == row["tp"]
        assert values["skipping_publish_num"] == "0" and values["dropped_scan_count"] == "0"
        assert float(values["node_latency_ms"]) > float(values["align_time_ms"]) >= 0.0
        for key in ("local_optimal_solution_oscillation_num", "execution_time", "localizability_condition",
                    "frame_status", "sensor_points_delay_time_sec"):
            assert key in values
    # The first frame is aligned from --init as given, the later ones from the motion model.
    sources = [values["prediction_source"] for _, _, values in statuses]
    assert sources == ["initial pose"] + ["motion model"] * (FRAMES - 1), sources

    # The pose with its covariance (the parameter file's covariance_estimation_type 0: Autoware's
    # fixed output_pose_covariance), and the debug scalars, per frame.
    with_cov = listener.messages("ndt_pose_with_covariance")
    assert len(with_cov) == FRAMES
    assert [m.header.stamp for m in with_cov] == [p.header.stamp for p in poses]
    assert with_cov[0].pose.covariance[0] == pytest.approx(0.0225)
    assert with_cov[0].pose.covariance[35] == pytest.approx(0.000625)
    iterations = [m.data for m in listener.messages("iteration_num")]
    assert iterations == [int(r["iterations"]) for r in frames]
    for topic in ("transform_probability", "nearest_voxel_transformation_likelihood", "exe_time_ms"):
        assert len(listener.messages(topic)) == FRAMES, topic
    # points_aligned: the aligned scan in the map frame, one per published pose.
    aligned = listener.messages("points_aligned")
    assert len(aligned) == FRAMES
    assert aligned[0].header.frame_id == "map" and aligned[0].width > 1000


def test_ekf_prediction_and_sensor_to_base(listener, tmp_path, bags):
    """ekf_pose_with_covariance as Autoware's EKF sends it (the base frame's pose, here 50 ms
    before and after each scan): the node starts from it with no other pose, predicts each
    frame from it interpolated to the scan's stamp, and publishes the base frame's pose
    through the static sensor_to_base. Every pose is the base's true pose within 5 cm."""
    sensor_to_base = np.array([1.2, -0.3, 1.6, 0.02, -0.03, 0.4])  # the sensor in base_link
    t_base_sensor = ndtcu.pose_to_matrix(sensor_to_base)
    t_sensor_base = np.linalg.inv(t_base_sensor)
    truth_sensor = truth()
    node = start_node(listener, tmp_path, params=["sensor_to_base:=[" + ", ".join(repr(float(v)) for v in sensor_to_base) + "]"])
    try:
        # The EKF's poses at 20 Hz, in the base frame: each scan's true pose, and the
        # midpoint to the next (position halfway, the earlier rotation).
        ekf = []
        for (t0, p0), (t1, p1) in zip(truth_sensor, truth_sensor[1:]):
            mid = p0.copy()
            mid[:3, 3] = (p0[:3, 3] + p1[:3, 3]) / 2
            ekf += [(t0, p0 @ t_sensor_base), ((t0 + t1) / 2, mid @ t_sensor_base)]
        ekf.append((truth_sensor[-1][0], truth_sensor[-1][1] @ t_sensor_base))
        for t, p in ekf:
            m = PoseWithCovarianceStamped()
            m.header.frame_id = "map"
            m.header.stamp.sec, m.header.stamp.nanosec = divmod(round(t * 1e9), 1_000_000_000)
            m.pose.pose.position.x, m.pose.pose.position.y, m.pose.pose.position.z = p[:3, 3]
            o = m.pose.pose.orientation
            o.x, o.y, o.z, o.w = quaternion_xyzw(p[:3, :3])
            m.pose.covariance = list(np.diag([0.01, 0.01, 0.01, 0.001, 0.001, 0.001]).reshape(36))
            listener.ekf.publish(m)
        time.sleep(0.5)  # reliable and in order: the node holds them before the first scan
        play = Process("ndtcu.ros2.play", [bags["sample_mcap_zstd"]["path"], "--rate", "0", "--wait", "20"],
                       tmp_path / "play.log")
        assert play.wait(120) == 0, play.log()
        assert f"{FRAMES} scans, {FRAMES} answered" in play.log(), (play.log(), node.log())
    finally:
        rc = node.stop()
    assert rc == 0, node.log()
    statuses = [v for _, _, v in listener.statuses(SCAN_MATCHING)]
    assert len(statuses) == FRAMES
    for v in statuses:
        assert v["prediction_source"] == "ekf" and v["is_succeed_interpolate_initial_pose"] == "true", v
        assert v["is_converged"] == "true", v
    poses = listener.messages("ndt_pose")
    assert len(poses) == FRAMES
    for p, (t, sensor) in zip(poses, truth_sensor):
        base = sensor @ t_sensor_base
        assert np.linalg.norm(pose_matrix(p.pose)[:3, 3] - base[:3, 3]) < TRUTH_TOLERANCE_M
        rotation = pose_matrix(p.pose)[:3, :3].T @ base[:3, :3]
        assert np.arccos(np.clip((np.trace(rotation) - 1) / 2, -1, 1)) < np.radians(0.5)
    assert len(listener.messages("ndt_pose_with_covariance")) == FRAMES
