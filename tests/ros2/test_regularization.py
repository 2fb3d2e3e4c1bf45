"""regularization_pose_with_covariance, Autoware's GNSS pose for ndt.regularization, enabled
through the parameter file: each pose gets its regularization_pose_subscriber_status (OK when
taken, WARN when refused), a scan with no EKF pose is predicted from it and regularized about
it, and a GNSS pose 1 m ahead of the vehicle pulls the pose forward, one 1 m behind pulls it
back, by centimetres, against the same predictions without the regularization."""
import numpy as np

from conftest import (CONFIG, SCAN_MATCHING, Process, init_arg, pose_matrix, pose_with_covariance_msg,
                      scan_stamp_ns, start_node, truth, wait_until)

FRAMES = 10
REGULARIZATION = "ndt_scan_matcher: regularization_pose_subscriber_status"
EKF = "ndt_scan_matcher: initial_pose_subscriber_status"
# The GNSS poses: each scan's true pose moved along the vehicle's heading, ahead at even
# frames and behind at odd ones, with a GNSS-like covariance (1 m, 0.1 rad) under which
# the correction passes the localizer's gate.
OFFSET_M = 1.0
COVARIANCE = np.diag([1.0, 1.0, 1.0, 0.01, 0.01, 0.01])
# The pull. Autoware's regularization adds scale_factor (the file's 0.01) x the point-voxel
# pairs (some 2,000 here) x the squared longitudinal distance to the GNSS pose to the score:
# measured on the sample bag, it moves each pose 2.2-3.2 cm along the heading towards the
# GNSS pose, and 0.5-1.1 cm across it, against the same prediction without it.
PULL_MIN_M = 0.015
# A pulled pose is still right within this of the truth (m).
TRUTH_TOLERANCE_M = 0.1


def heading(pose):
    """The unit x-y direction of the pose's x axis (the vehicle's forward)."""
    h = np.array([pose[0, 0], pose[1, 0], 0.0])
    return h / np.linalg.norm(h)


def gnss_poses():
    """(stamp ns, 4x4 pose, sign of the offset) of each scan."""
    out = []
    for k, (_, pose) in enumerate(truth()[:FRAMES]):
        sign = 1.0 if k % 2 == 0 else -1.0
        moved = pose.copy()
        moved[:3, 3] += sign * OFFSET_M * heading(pose)
        out.append((scan_stamp_ns(k), moved, sign))
    return out


def regularization_config(tmp_path):
    """The parameter file with ndt.regularization enabled (its scale_factor: 0.01)."""
    text = CONFIG.read_text()
    enabled = text.replace("regularization:\n        enable: false", "regularization:\n        enable: true")
    assert enabled != text
    path = tmp_path / "ndt_scan_matcher.regularization.param.yaml"
    path.write_text(enabled)
    return path


def run(listener, tmp_path, bag, name, config, publisher, status, before=()):
    """The node with `config`; `before` ((publisher, message, status) triples: each message
    sent until its status comes) then the GNSS poses
    published on `publisher`, each answered by an OK `status`; then the bag played. Returns
    the poses, the scan_matching_status values, the pose topics' statuses (by name) and the
    node's log; the listener is cleared."""
    # Both runs at the map's one resolution, as Autoware aligns (--refine-ratio 0): the pull
    # is measured against the same unrefined poses (a frame aligned with the regularization
    # is not refined anyway; the plain run's would be).
    node = start_node(listener, tmp_path, [init_arg(), "--refine-ratio", "0"], config=config, name=name)
    try:
        for p in {publisher, *(p for p, _, _ in before)}:
            assert wait_until(lambda: p.get_subscription_count() > 0, 10), p.topic_name
        for p, m, s in before:
            # The publisher sees the node's subscription before the node has matched the
            # publisher: a message sent then is lost (2 runs in 5 lost it). Sent again until
            # its status comes, which a lost message never gives.
            for _ in range(20):
                seen = len(listener.statuses(s))
                p.publish(m)
                if wait_until(lambda: len(listener.statuses(s)) > seen, 0.5):
                    break
            else:
                raise AssertionError(f"no {s} status for the message on {p.topic_name}: {node.log()}")
        poses = gnss_poses()
        for stamp, pose, _ in poses:
            publisher.publish(pose_with_covariance_msg(pose, stamp, COVARIANCE))
        assert wait_until(lambda: sum(s[0] == b"\x00" for s in listener.statuses(status)) >= FRAMES, 10), \
            (listener.statuses(status), node.log())
        play = Process("ndtcu.ros2.play", [bag, "--rate", "0", "--wait", "20"], tmp_path / f"{name}_play.log")
        assert play.wait(120) == 0, play.log()
        assert f"{FRAMES} scans, {FRAMES} answered" in play.log(), (play.log(), node.log())
        assert wait_until(lambda: len(listener.statuses(SCAN_MATCHING)) >= FRAMES, 10), node.log()
    finally:
        rc = node.stop()
    log = node.log()
    assert rc == 0, log
    out = ([pose_matrix(p.pose) for p in listener.messages("ndt_pose")],
           [v for _, _, v in listener.statuses(SCAN_MATCHING)],
           {s: listener.statuses(s) for s in (EKF, REGULARIZATION)}, log)
    listener.clear()
    return out


def test_regularization_pose(listener, tmp_path, bags):
    bag = bags["sample_mcap"]["path"]
    gnss = gnss_poses()

    # Without regularization (the parameter file as Autoware ships it): the GNSS poses sent as
    # the EKF's, the frames' predictions. A GNSS pose is taken, and says it is not used.
    unused = pose_with_covariance_msg(gnss[0][1], gnss[0][0], COVARIANCE)
    plain, plain_frames, statuses, log = run(listener, tmp_path, bag, "ekf", CONFIG, listener.ekf, EKF,
                                             before=[(listener.regularization, unused, REGULARIZATION)])
    assert len(plain) == FRAMES, log
    assert all(v["prediction_source"] == "ekf" and v["is_converged"] == "true" for v in plain_frames), plain_frames
    assert len(statuses[EKF]) == FRAMES
    assert all(level == b"\x00" and v["is_ok"] == "true" for level, _, v in statuses[EKF]), statuses[EKF]
    [(level, message, values)] = statuses[REGULARIZATION]
    assert level == b"\x00" and "not used" in message and values["is_regularization_enabled"] == "false", values

    # With it, the poses on regularization_pose_with_covariance, no EKF; first one in the odom
    # frame, refused.
    odom = pose_with_covariance_msg(gnss[0][1], gnss[0][0], COVARIANCE, frame_id="odom")
    pulled, frames, statuses, log = run(listener, tmp_path, bag, "regularization", regularization_config(tmp_path),
                                        listener.regularization, REGULARIZATION,
                                        before=[(listener.regularization, odom, REGULARIZATION)])
    assert len(pulled) == FRAMES, log
    assert statuses[EKF] == []
    statuses = statuses[REGULARIZATION]
    level, message, values = statuses[0]
    assert level == b"\x01" and "frame_id 'odom'" in message, statuses[0]
    assert values["is_ok"] == "false" and values["is_expected_frame_id"] == "false", values
    assert "regularization_pose_with_covariance: frame_id 'odom'" in log, log
    assert len(statuses) == FRAMES + 1
    for level, message, values in statuses[1:]:
        assert level == b"\x00" and values["is_ok"] == "true", (message, values)
        assert values["is_regularization_enabled"] == "true", values
    assert len(frames) == FRAMES
    for v in frames:
        assert v["prediction_source"] == "regularization" and v["is_converged"] == "true", v

    # The pull: along the heading, towards the GNSS pose, more than across it.
    for k, (a, b, (_, _, sign), (_, true_pose)) in enumerate(zip(plain, pulled, gnss, truth())):
        h = heading(true_pose)
        d = b[:3, 3] - a[:3, 3]
        along = float(d @ h)
        across = float(np.linalg.norm(d - along * h))
        assert sign * along > PULL_MIN_M, f"frame {k}: pulled {along:+.4f} m along the heading, GNSS offset {sign:+}"
        assert abs(along) > 2 * across, f"frame {k}: {along:+.4f} m along the heading, {across:.4f} m across"
        assert np.linalg.norm(b[:3, 3] - true_pose[:3, 3]) < TRUTH_TOLERANCE_M, k
