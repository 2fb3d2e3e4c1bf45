"""BALM (../shared/data/balm_os0: an Ouster OS0 carried through a building, 73,000 points a
scan at 1 Hz) played to the node from the rosbag_balm_bags fixture's bag: with no pose the
node refuses the scan and waits; an initialpose 3 m and 90 deg off (as a person would click
it, with a position uncertainty of 1.5 m) makes the next scan search about it, and that pose
and the ones after it are right: within 5 cm of BALM's reference poses."""
import os
import pathlib

import numpy as np
from geometry_msgs.msg import PoseWithCovarianceStamped

from conftest import Process, data_dir, pose_matrix, read_tum, start_node, wait_until

import ndtcu
from ndtcu.ros2.play import quaternion_xyzw

BALM = pathlib.Path(os.environ.get("NDTCU_BALM_DIR") or (data_dir() or pathlib.Path("-")) / "balm_os0")
SCANS = 5
TRUTH_TOLERANCE_M = 0.05
OFFSET_M, OFFSET_YAW = 3.0, np.pi / 2
SIGMA_M = 1.5  # the initialpose's position uncertainty: the search's radius is three of it


def test_initialpose_search(listener, tmp_path):
    bag = pathlib.Path(os.environ["NDTCU_BAG_DIR"]) / "balm_mcap_zstd"
    reference = {round(t * 1e6): pose for t, pose in read_tum(BALM / "poses_tum.txt")}
    reader = ndtcu.BagReader(str(bag))
    times = reader.record_times_ns("/points")[:SCANS]
    node = start_node(listener, tmp_path, map_path=BALM / "map_even_frames_0-58_voxel0.1.pcd")
    try:
        # No pose yet: the scan is refused, and says why.
        listener.points.publish(reader.read_point_cloud2_cdr("/points", 0))
        assert wait_until(lambda: len(listener.statuses()) == 1, 20.0), node.log()
        level, message, values = listener.statuses()[0]
        assert values["refused"] == "no_initial_pose" and "initialpose" in message

        # The initialpose: the first scan's true pose moved 3 m and turned 90 deg.
        truth0 = reference[round(times[0] / 1e3)]
        off = truth0.copy()
        off[:3, :3] = ndtcu.pose_to_matrix(np.array([0, 0, 0, 0, 0, OFFSET_YAW]))[:3, :3] @ truth0[:3, :3]
        off[:2, 3] += OFFSET_M * np.array([np.cos(np.pi / 4), -np.sin(np.pi / 4)])
        m = PoseWithCovarianceStamped()
        m.header.frame_id = "map"
        m.pose.pose.position.x, m.pose.pose.position.y, m.pose.pose.position.z = off[:3, 3]
        o = m.pose.pose.orientation
        o.x, o.y, o.z, o.w = quaternion_xyzw(off[:3, :3])
        m.pose.covariance = list(np.diag([SIGMA_M ** 2, SIGMA_M ** 2, 0.01, 0.01, 0.01, 1.0]).reshape(36))
        listener.initialpose.publish(m)
        align = "ndt_scan_matcher: ndt_align_service_status"
        assert wait_until(lambda: len(listener.statuses(align)) == 1, 10.0), node.log()
        assert listener.statuses(align)[0][0] == b"\x00"

        play = Process("ndtcu.ros2.play", [bag, "--rate", "0", "--count", SCANS, "--answer-timeout", "60"],
                       tmp_path / "play.log")
        assert play.wait(120) == 0, play.log()
        assert f"{SCANS} scans, {SCANS} answered" in play.log(), play.log()
    finally:
        rc = node.stop()
    assert rc == 0, node.log()

    statuses = [v for _, _, v in listener.statuses()][1:]
    assert len(statuses) == SCANS
    assert statuses[0]["prediction_source"] == "initial search", statuses[0]
    assert all(v["is_converged"] == "true" for v in statuses), statuses
    poses = listener.messages("ndt_pose")
    assert [p.header.stamp.sec * 1_000_000_000 + p.header.stamp.nanosec for p in poses] == times
    for p in poses:
        t = p.header.stamp.sec + p.header.stamp.nanosec * 1e-9
        error = np.linalg.norm(pose_matrix(p.pose)[:3, 3] - reference[round(t * 1e6)][:3, 3])
        assert error < TRUTH_TOLERANCE_M, (t, error)
