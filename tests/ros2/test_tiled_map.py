"""map_path a folder of Autoware's tiles (pointcloud_map_metadata.yaml), made from the sample
map by `ndtcu map tile`: the node loads and streams it as `ndtcu localize --map DIR` does,
and every frame of the sample bag is published with the pose of the single PCD map. An
initialpose beyond the tiles loaded loads the tiles about it, as a start there would.

formats.md ("Tiled maps") says what a tiled map guarantees: tiles of a multiple of the NDT
resolution hold the whole map's voxels bit for bit, and with scans no longer than the loaded
radius minus the update distance, the streamed tiles give the whole map's poses. So the poses
are compared exactly (the TUM lines `ndtcu localize` writes on the single PCD), not within a
tolerance."""
import json
import subprocess

import numpy as np

from conftest import (SAMPLE, Process, init_arg, localize_cli, pose_matrix, pose_with_covariance_msg, read_tum,
                      scan_stamp_ns, start_node, tum_line, truth, wait_until)

import ndtcu

FRAMES = 10
# 10 m tiles: a multiple of the parameter file's 2 m resolution, so no voxel spans two tiles.
TILE_SIZE_M = 10
# The sample map is some 100 m x 80 m: within the parameter file's map_radius (150 m) of any
# pose, every tile is loaded about the first one. To stream, the scans are cropped to 20 m
# and the tiles kept within 22 m, updated every 2 m: a 6 m drive then takes its updates (one
# frame of it finds the map in hand short of the tiles its scan reaches and waits for the
# update, as `localize` on it reports, so at least one is swapped in whatever the timing),
# and the scans never reach past the loaded tiles (20 <= 22 - 2).
STREAM_ARGS = ["--max-range", "20", "--map-radius", "22", "--map-update-distance", "2"]


def make_tiles(cli, out):
    subprocess.run([cli, "-q", "map", "tile", str(SAMPLE / "map.pcd"), "--tile-size", str(TILE_SIZE_M), "--out",
                    str(out)], check=True, timeout=60)
    assert (out / "pointcloud_map_metadata.yaml").is_file()
    assert len(list(out.glob("*.pcd"))) > 20  # a map of tiles, not one
    return out


def play(bag, tmp_path, node):
    p = Process("ndtcu.ros2.play", [bag, "--rate", "0", "--wait", "20"], tmp_path / "play.log")
    assert p.wait(120) == 0, p.log()
    assert f"{FRAMES} scans, {FRAMES} answered" in p.log(), (p.log(), node.log())


def test_tiles_give_the_single_maps_poses(listener, tmp_path, cli, bags):
    """Every tile loaded about --init: the node's poses are `localize --map map.pcd`'s."""
    tiles = make_tiles(cli, tmp_path / "tiles")
    bag = bags["sample_mcap"]["path"]
    # A tiled map has no finer voxels (--refine-ratio): the single map's poses unrefined.
    expected, _ = localize_cli(cli, bag, tmp_path / "cli", init_arg(), "--refine-ratio", "0")
    assert len(expected) == FRAMES
    node = start_node(listener, tmp_path, [init_arg()], map_path=tiles)
    try:
        play(bag, tmp_path, node)
        assert wait_until(lambda: len(listener.statuses()) >= FRAMES, 10), node.log()
    finally:
        rc = node.stop()
    log = node.log()
    assert rc == 0, log
    # The tiles joined: the single map's points and voxels.
    single = json.loads((tmp_path / "cli" / "summary.json").read_text())["map"]
    assert f"map {tiles}: {single['points']} points, {single['voxels']} voxels" in log, (single, log)

    poses = listener.messages("ndt_pose")
    assert len(poses) == FRAMES, log
    for k, p in enumerate(poses):
        line = tum_line(p.header.stamp, p.pose)
        assert line == expected[line.split()[0]], f"frame {k}: node on tiles {line} against localize on map.pcd"
    statuses = listener.statuses()
    assert len(statuses) == FRAMES
    for level, message, values in statuses:
        assert level == b"\x00" and values["is_converged"] == "true", (message, values)
        assert values["map_update_count"] == "0", values  # all of it loaded at the start
    sources = [values["prediction_source"] for _, _, values in statuses]
    assert sources == ["initial pose"] + ["motion model"] * (FRAMES - 1), sources  # --init as given
    assert len(listener.messages("ndt_pose_with_covariance")) == FRAMES


def test_tiles_streamed_about_the_first_pose(listener, tmp_path, cli, bags):
    """No --init: the tiles are loaded about the first pose the node gets (an initialpose),
    then streamed as the pose moves; the poses are `localize --map map.pcd`'s with the same
    --max-range."""
    tiles = make_tiles(cli, tmp_path / "tiles")
    bag = bags["sample_mcap_zstd"]["path"]
    expected, _ = localize_cli(cli, bag, tmp_path / "cli", init_arg(), "--max-range", "20", "--refine-ratio", "0")
    assert len(expected) == FRAMES
    node = start_node(listener, tmp_path, STREAM_ARGS, map_path=tiles)
    try:
        assert "tiles, loaded about the first pose" in node.log(), node.log()
        # The bag's first scan before any pose: refused, and no map yet.
        listener.points.publish(ndtcu.BagReader(str(bag)).read_point_cloud2_cdr("/points", 0))
        assert wait_until(lambda: len(listener.statuses()) == 1, 20), node.log()
        level, message, values = listener.statuses()[0]
        assert level == b"\x01" and values["refused"] == "no_initial_pose", (message, values)
        assert values["is_set_map_points"] == "false", values

        # The first scan's true pose as an initialpose with no uncertainty: taken as it is.
        align = "ndt_scan_matcher: ndt_align_service_status"
        listener.initialpose.publish(pose_with_covariance_msg(truth()[0][1], scan_stamp_ns(0), np.zeros((6, 6))))
        assert wait_until(lambda: len(listener.statuses(align)) == 1, 10), node.log()
        assert listener.statuses(align)[0][0] == b"\x00", listener.statuses(align)

        play(bag, tmp_path, node)
        assert wait_until(lambda: len(listener.statuses()) >= FRAMES + 1, 10), node.log()
    finally:
        rc = node.stop()
    log = node.log()
    assert rc == 0, log

    poses = listener.messages("ndt_pose")
    assert len(poses) == FRAMES, log
    for k, p in enumerate(poses):
        line = tum_line(p.header.stamp, p.pose)
        assert line == expected[line.split()[0]], f"frame {k}: node on streamed tiles {line} against map.pcd's"
    statuses = listener.statuses()[1:]
    assert len(statuses) == FRAMES
    for level, message, values in statuses:
        assert level == b"\x00" and values["is_converged"] == "true", (message, values)
    # The initialpose had no uncertainty: the first frame is aligned from it as it is.
    sources = [values["prediction_source"] for _, _, values in statuses]
    assert sources == ["initial pose"] + ["motion model"] * (FRAMES - 1), sources
    # The map moved with the pose.
    assert int(statuses[-1][2]["map_update_count"]) >= 1, statuses[-1]


# A simulated 10 Hz drive whose map the simulator writes as 10 m tiles: its first
# FIRST_FRAMES frames are tracked from --init with STREAM_ARGS' tiles, then an initialpose
# comes for frame JUMP_FRAME, 58 m on, and the frames from it follow. (Seed 2's drive: on it
# `localize` with --max-range 20 tracks these frames within 4.2 cm of the truth.)
SIM_FRAMES = 60
FIRST_FRAMES = 3
JUMP_FRAME = 54
# A pose is right within this of the truth (m), as in test_node.py.
TRUTH_TOLERANCE_M = 0.05


def simulate(cli, out):
    """A small simulated drive (150 m world, about 15,000 points a scan, 1.4 million map
    points in 10 m tiles): the tiled map `out/sim/map`, the true poses and the ROS 2 bag
    `out/bag`."""
    subprocess.run([cli, "-q", "simulate", "--out", str(out / "sim"), "--rosbag", str(out / "bag"), "--frames",
                    str(SIM_FRAMES), "--seed", "2", "--world-size", "150", "--scan-points", "15000",
                    "--map-tile-size", str(TILE_SIZE_M)], check=True, timeout=60, stdout=subprocess.DEVNULL)
    assert (out / "sim" / "map" / "pointcloud_map_metadata.yaml").is_file()
    return out / "sim" / "map", read_tum(out / "sim" / "poses_tum.txt"), out / "bag"


def test_initialpose_beyond_the_loaded_tiles(listener, tmp_path, cli):
    """Tracking from --init with 22 m of tiles streamed, then an initialpose 58 m away (0.5 m
    and 10 deg off the truth, with RViz's covariance), where none of the tiles loaded lies
    within the scan's reach: the node loads the tiles about it before its search runs (as
    a start there does), finds the pose, and tracks on from it, every frame within 5 cm of
    the truth. (Before, the tiles followed accepted poses only, and every frame after the
    initialpose was lost.)"""
    tiles, poses, bag = simulate(cli, tmp_path)
    option = dict(zip(STREAM_ARGS[::2], map(float, STREAM_ARGS[1::2])))
    # A tile loaded about a tracked pose has its points within the map radius plus a tile's
    # diagonal of it; the scan after the jump reaches --max-range: they do not meet.
    loaded_reach = option["--map-radius"] + TILE_SIZE_M * np.sqrt(2) + option["--max-range"]
    jump = min(np.linalg.norm(poses[JUMP_FRAME][1][:2, 3] - poses[k][1][:2, 3]) for k in range(FIRST_FRAMES))
    assert jump > loaded_reach, (jump, loaded_reach)
    reader = ndtcu.BagReader(str(bag))
    node = start_node(listener, tmp_path, [init_arg(poses[0][1]), *STREAM_ARGS], map_path=tiles)

    def scan(k, statuses):
        listener.points.publish(reader.read_point_cloud2_cdr("/points", k))
        assert wait_until(lambda: len(listener.statuses()) >= statuses, 30), node.log()

    frames = list(range(FIRST_FRAMES)) + list(range(JUMP_FRAME, SIM_FRAMES))
    try:
        for n, k in enumerate(frames[:FIRST_FRAMES]):
            scan(k, n + 1)
        # The pose of the frame after the jump, moved 0.5 m sideways and turned 10 deg, as a
        # person sets it in RViz (its covariance: 0.5 m in x and y, so a search within 1.5 m).
        guess = poses[JUMP_FRAME][1] @ ndtcu.pose_to_matrix(np.array([0.0, 0.5, 0.0, 0.0, 0.0, np.radians(10.0)]))
        covariance = np.diag([0.25, 0.25, 0.0, 0.0, 0.0, 0.06853891945200942])
        align = "ndt_scan_matcher: ndt_align_service_status"
        listener.initialpose.publish(pose_with_covariance_msg(guess, round(poses[JUMP_FRAME][0] * 1e9), covariance))
        assert wait_until(lambda: len(listener.statuses(align)) == 1, 10), node.log()
        assert listener.statuses(align)[0][0] == b"\x00", listener.statuses(align)
        for n, k in enumerate(frames[FIRST_FRAMES:], FIRST_FRAMES):
            scan(k, n + 1)
    finally:
        rc = node.stop()
    log = node.log()
    assert rc == 0, log

    statuses = listener.statuses()
    assert len(statuses) == len(frames), log
    for n, (k, (level, message, values)) in enumerate(zip(frames, statuses)):
        assert values["is_converged"] == "true", (k, message, values, log)
        # The search about the initialpose may take longer than critical_upper_bound_exe_time_ms.
        ok = level == b"\x00" or (n == FIRST_FRAMES and message.startswith("execution time"))
        assert ok, (k, level, message)
    sources = [values["prediction_source"] for _, _, values in statuses]
    after = len(frames) - FIRST_FRAMES - 1
    assert sources == (["initial pose"] + ["motion model"] * (FIRST_FRAMES - 1) + ["initial search"]
                       + ["motion model"] * after), sources
    # The tiles about the initialpose were swapped in at the frame after it.
    updates = [int(values["map_update_count"]) for _, _, values in statuses]
    assert updates[FIRST_FRAMES] > updates[FIRST_FRAMES - 1], updates
    published = listener.messages("ndt_pose")
    assert len(published) == len(frames), log
    for k, p in zip(frames, published):
        t, reference = poses[k]
        assert abs(p.header.stamp.sec + p.header.stamp.nanosec * 1e-9 - t) < 1e-6, (k, p.header.stamp, t)
        error = np.linalg.norm(pose_matrix(p.pose)[:3, 3] - reference[:3, 3])
        assert error < TRUTH_TOLERANCE_M, f"frame {k}: {error:.3f} m from the truth"
