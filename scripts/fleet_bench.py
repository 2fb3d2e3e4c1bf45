#!/usr/bin/env python3
"""Ray's cost per run, and the fleet's throughput on several GPUs (see BENCHMARK.md,
"Fleets on Ray").

    PYTHONPATH=build/python python scripts/fleet_bench.py overhead --map MAP --scans SCANS \\
        [--init-from TUM] [--runs 6] [--threads 1]
    PYTHONPATH=build/python python scripts/fleet_bench.py gpus --map MAP --scans SCANS \\
        [--init-from TUM] [--runs 8]

overhead: the same run, N times, first in this process (ndtcu.fleet.execute, one after the
other), then as N Ray tasks on a local cluster of one CPU (one after the other): the
difference per run is what Ray adds (task start, worker, the files brought back),
cluster start excluded. gpus: N equal runs as a fleet on one GPU (a local cluster offering
one), then on every GPU of the host: the wall times, their ratio, and the device of each run.
"""
import argparse
import json
import os
import sys
import tempfile
import time

import yaml


def manifest(args, tmp, runs):
    settings = {"init-from": args.init_from} if args.init_from else {}
    doc = {"runs": [{"name": f"r{i}", "map": args.map, "scans": args.scans, "settings": dict(settings)}
                    for i in range(runs)]}
    path = os.path.join(tmp, "bench.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(doc, f)
    return path


def fleet(path, out, **kw):
    from ndtcu.fleet import run_fleet

    t0 = time.perf_counter()
    code = run_fleet(path, out, progress=False, **kw)
    wall = time.perf_counter() - t0
    with open(os.path.join(out, "fleet.json")) as f:
        doc = json.load(f)
    return code, wall, doc


def overhead(args):
    import ray

    from ndtcu.fleet import load
    from ndtcu.fleet.runner import execute

    with tempfile.TemporaryDirectory() as tmp:
        path = manifest(args, tmp, args.runs)
        runs = load(path).runs
        execute({"name": "warm", "args": runs[0].args, "threads": args.threads})  # caches, first touch
        t0 = time.perf_counter()
        for r in runs:
            res = execute({"name": r.name, "args": r.args, "threads": args.threads})
            assert "files" in res, res.get("error")
        local = time.perf_counter() - t0
        t0 = time.perf_counter()
        ray.init(num_cpus=1, num_gpus=0, include_dashboard=False, log_to_driver=False, logging_level="WARNING")
        start = time.perf_counter() - t0
        try:
            code, wall, doc = fleet(path, os.path.join(tmp, "out"), cpus_per_run=args.threads, gpus_per_run=0)
        finally:
            ray.shutdown()
        assert code == 0, doc["counts"]
        frames = sum(r["frames"] for r in doc["runs"])
        print(f"{args.runs} runs of {frames // args.runs} frames, CPU backend, {args.threads} thread(s)")
        print(f"  in one process:   {local:.2f} s ({local / args.runs:.2f} s per run)")
        print(f"  as Ray tasks:     {wall:.2f} s ({wall / args.runs:.2f} s per run), cluster start {start:.1f} s")
        print(f"  Ray's cost:       {(wall - local) / args.runs:.2f} s per run")


def gpus(args):
    import ray

    import ndtcu

    devices = ndtcu.cuda_devices()
    if len(devices) < 1:
        sys.exit("no CUDA device: " + ndtcu.cuda_unavailable_reason())
    with tempfile.TemporaryDirectory() as tmp:
        path = manifest(args, tmp, args.runs)
        results = {}
        for n in sorted({1, len(devices)}):
            ray.init(num_gpus=n, include_dashboard=False, log_to_driver=False, logging_level="WARNING")
            try:
                code, wall, doc = fleet(path, os.path.join(tmp, f"out{n}"), gpus_per_run=1)
            finally:
                ray.shutdown()
            assert code == 0, doc["counts"]
            results[n] = wall
            used = sorted({r["device"] for r in doc["runs"]})
            print(f"{n} GPU(s): {args.runs} runs in {wall:.2f} s, {doc['frames_per_second']:.1f} frames/s; "
                  f"devices {used}")
        if len(results) > 1:
            print(f"wall time on {len(devices)} GPUs / on 1: {results[len(devices)] / results[1]:.2f}; "
                  f"throughput {results[1] / results[len(devices)]:.2f}x")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("mode", choices=["overhead", "gpus"])
    ap.add_argument("--map", required=True)
    ap.add_argument("--scans", required=True)
    ap.add_argument("--init-from")
    ap.add_argument("--runs", type=int, default=6)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    for p in ("map", "scans", "init_from"):
        if getattr(args, p):
            setattr(args, p, os.path.abspath(getattr(args, p)))
    overhead(args) if args.mode == "overhead" else gpus(args)


if __name__ == "__main__":
    main()
