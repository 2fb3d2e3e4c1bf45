#!/usr/bin/env python3
"""Localizes the point clouds of a rosbag in a map with the Python module ndtcu, writes the
trajectory as a TUM file and plots it with matplotlib.

    PYTHONPATH=build/python python scripts/localize_bag.py MAP BAG --out DIR \\
        [--topic /points] [--init-from POSES_TUM | --init X Y Z ROLL PITCH YAW] \\
        [--reference POSES_TUM] [--backend auto|cpu|cuda] [--threads N] [--no-plot]

The bag is read by the module's reader (ndtcu.BagReader: ROS 1 .bag, ROS 2 sqlite3 or
mcap, no ROS needed); each message is localized at its record time with ndtcu.Localizer's
default settings, as `ndtcu localize --scans BAG` does, so DIR/trajectory_tum.txt (valid
frames only) holds the CLI's lines. DIR/frames.csv lists every frame, DIR/trajectory.png
plots x-y (with the reference when given). Check the result with evo, e.g.
`evo_ape tum POSES_TUM DIR/trajectory_tum.txt`.
"""
import argparse
import os
import sys
import time

import numpy as np

import ndtcu
from ndtcu.written_whole import written_whole


def read_tum(path):
    """(times, list of 4x4 poses) of a TUM file."""
    rows = np.loadtxt(path, comments="#", ndmin=2)
    poses = []
    for t, x, y, z, qx, qy, qz, qw in rows:
        q = np.array([qw, qx, qy, qz]) / np.linalg.norm([qw, qx, qy, qz])
        w, a, b, c = q
        m = np.eye(4)
        m[:3, :3] = [[1 - 2 * (b * b + c * c), 2 * (a * b - c * w), 2 * (a * c + b * w)],
                     [2 * (a * b + c * w), 1 - 2 * (a * a + c * c), 2 * (b * c - a * w)],
                     [2 * (a * c - b * w), 2 * (b * c + a * w), 1 - 2 * (a * a + b * b)]]
        m[:3, 3] = [x, y, z]
        poses.append(m)
    return rows[:, 0], poses


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("map", help="map point cloud (.pcd, .ply, .bin)")
    ap.add_argument("bag", help="rosbag: .bag, .mcap, .db3 or a ROS 2 bag folder")
    ap.add_argument("--out", required=True, help="output folder")
    ap.add_argument("--topic", default="", help="PointCloud2 topic (default: the bag's only one)")
    init = ap.add_mutually_exclusive_group()
    init.add_argument("--init-from", help="TUM file: the pose nearest the first scan's time starts the tracking")
    init.add_argument("--init", type=float, nargs=6, metavar=("X", "Y", "Z", "ROLL", "PITCH", "YAW"))
    ap.add_argument("--reference", help="TUM file of true poses, plotted with the estimate")
    ap.add_argument("--max-time-difference", type=float, default=0.1,
                    help="--init-from: largest gap (s) between its pose and the first scan")
    ap.add_argument("--backend", default="auto", choices=["auto", "cpu", "cuda"])
    ap.add_argument("--threads", type=int, default=0, help="CPU threads (0: all)")
    ap.add_argument("--no-plot", action="store_true", help="do not draw trajectory.png")
    args = ap.parse_args()

    bag = ndtcu.BagReader(args.bag)
    topic = bag.point_cloud_topic(args.topic)
    times = bag.times(topic)
    if len(times) == 0:
        sys.exit(f"{args.bag}: topic {topic} holds no message")

    if args.init is not None:
        initial = ndtcu.pose_to_matrix(np.array(args.init))
    elif args.init_from:
        ref_times, ref_poses = read_tum(args.init_from)
        if len(ref_poses) == len(times):
            k = 0  # one pose per scan: by index, as the CLI does
        else:
            k = int(np.argmin(np.abs(ref_times - times[0])))
            if abs(ref_times[k] - times[0]) > args.max_time_difference:
                sys.exit(f"--init-from {args.init_from}: no pose within {args.max_time_difference} s of {times[0]:.6f}")
        initial = ref_poses[k]
    else:
        initial = np.eye(4)

    execution = ndtcu.ExecutionOptions(backend=args.backend, threads=args.threads)
    loc = ndtcu.Localizer(ndtcu.LocalizerSettings(), execution)
    t0 = time.perf_counter()
    loc.set_map(ndtcu.read_point_cloud(args.map))
    map_s = time.perf_counter() - t0
    loc.set_initial_pose(initial)

    os.makedirs(args.out, exist_ok=True)
    xy, status = [], []
    # Both files written whole: in place once every frame is done, or not at all.
    with written_whole(os.path.join(args.out, "trajectory_tum.txt")) as tum, \
            written_whole(os.path.join(args.out, "frames.csv")) as csv:
        csv.write("index,time,status,stage,x,y,z,roll,pitch,yaw,nvtl,iterations,align_ms\n")
        t0 = time.perf_counter()
        for i, t in enumerate(times):
            f = loc.localize(bag.read_point_cloud(topic, i), float(t))
            p = f.xyzrpy
            csv.write(f"{i},{t:.9f},{f.status},{f.stage}," + ",".join(f"{v:.9f}" for v in p) +
                      f",{f.alignment.nvtl:.6f},{f.iterations_total},{f.align_ms:.3f}\n")
            if f.valid:  # as `ndtcu localize`: lost frames are in frames.csv only
                tum.write(ndtcu.tum_line(float(t), f.pose) + "\n")
            xy.append(f.pose[:2, 3])
            status.append(f.status)
        loop_s = time.perf_counter() - t0

    lost = status.count("lost")
    print(f"{len(times)} frames from {args.bag} ({topic}), {len(times) - lost} localized, {lost} lost; "
          f"map {map_s:.2f} s, {len(times) / loop_s:.1f} frames/s on {loc.backend}")
    print(f"wrote {os.path.join(args.out, 'trajectory_tum.txt')} and frames.csv")

    if not args.no_plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        xy = np.array(xy)
        fig, ax = plt.subplots(figsize=(6, 6))
        if args.reference:
            _, ref = read_tum(args.reference)
            r = np.array([m[:2, 3] for m in ref])
            ax.plot(r[:, 0], r[:, 1], "k--", lw=1, label="reference")
        ax.plot(xy[:, 0], xy[:, 1], "-", color="tab:blue", lw=1.5, label="ndtcu")
        bad = np.array([s == "lost" for s in status])
        if bad.any():
            ax.plot(xy[bad, 0], xy[bad, 1], "x", color="tab:red", label="lost (prediction)")
        ax.set_xlabel("x (m)")
        ax.set_ylabel("y (m)")
        ax.set_aspect("equal", adjustable="datalim")
        ax.set_title(f"{os.path.basename(os.path.normpath(args.bag))}: {topic}")
        ax.legend()
        fig.tight_layout()
        png = os.path.join(args.out, "trajectory.png")
        with written_whole(png, "wb") as f:
            fig.savefig(f, format="png", dpi=120)
        print(f"wrote {png}")


if __name__ == "__main__":
    main()
