"""Per-call overhead of the two bindings: median (and min) over runs of 10^6 calls."""
import statistics
import sys
import timeit

import numpy as np

sys.path.insert(0, sys.argv[1])
import overhead_nanobind as nbm  # noqa: E402
import overhead_pybind11 as pbm  # noqa: E402

calls = 1_000_000
runs = 7
points = np.zeros((1000, 3), dtype=np.float32)
for label, stmt in (("noop()", "m.noop()"), ("first_x(float32 (1000, 3))", "m.first_x(points)")):
    for name, mod in (("nanobind", nbm), ("pybind11", pbm)):
        t = timeit.repeat(stmt, globals={"m": mod, "points": points}, number=calls, repeat=runs)
        ns = [x / calls * 1e9 for x in t]
        print(f"{label:28s} {name:9s} median {statistics.median(ns):7.1f} ns  min {min(ns):7.1f} ns")
