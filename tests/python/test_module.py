"""The Python module against the command-line tool, and its contract at the boundary:
no copy of a PointCloud's points or of a float32 array a scan is read from, errors naming
the bad argument, the GIL released."""
import json
import os
import pathlib
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import ndtcu

SCAN = 3
# A start 0.4 m and a few degrees off the true pose: inside the basin, several iterations.
OFFSET = np.array([0.3, -0.25, 0.05, 0.01, -0.01, 0.05])


def guess_pose(truth_poses):
    return ndtcu.matrix_to_pose(truth_poses[SCAN]) + OFFSET


def test_read_point_cloud(sample):
    cloud = ndtcu.read_point_cloud(str(sample / "map.pcd"))
    pts = cloud.points
    assert pts.dtype == np.float32 and pts.shape == (len(cloud), 3) and pts.flags["C_CONTIGUOUS"]
    assert len(cloud) > 100000
    assert cloud.origin.shape == (3,)
    assert np.all(np.isfinite(pts))


def test_point_time(tmp_path):
    """Per-point time comes as float32 seconds (an Ouster-like uint32 `t` in nanoseconds),
    None when the file has none, and None when the times are implausible (all zero)."""
    header = ("VERSION 0.7\nFIELDS x y z t\nSIZE 4 4 4 4\nTYPE F F F U\nCOUNT 1 1 1 1\nWIDTH 3\nHEIGHT 1\n"
              "POINTS 3\nDATA ascii\n")
    (tmp_path / "t.pcd").write_text(header + "1 0 0 0\n2 0 0 50000000\n3 0 0 99000000\n")
    cloud = ndtcu.read_point_cloud(str(tmp_path / "t.pcd"))
    assert cloud.time.dtype == np.float32
    assert cloud.time.tolist() == [0.0, np.float32(0.05), np.float32(0.099)]
    (tmp_path / "zero.pcd").write_text(header + "1 0 0 0\n2 0 0 0\n3 0 0 0\n")
    assert ndtcu.read_point_cloud(str(tmp_path / "zero.pcd")).time is None
    assert ndtcu.PointCloud(np.zeros((2, 3), np.float32)).time is None


def test_write_point_cloud(sample, tmp_path):
    """An array is written as the PointCloud of the same points and origin 0 is (PCD and
    KITTI .bin), and reads back to the same points; a PointCloud keeps its intensities."""
    cloud = ndtcu.read_point_cloud(str(sample / "scans" / "000003.pcd"))
    pts = np.ascontiguousarray(cloud.points[::7])
    for name in ("s.pcd", "s.bin"):
        ndtcu.write_point_cloud(str(tmp_path / ("array_" + name)), pts)
        ndtcu.write_point_cloud(str(tmp_path / ("cloud_" + name)), ndtcu.PointCloud(pts))
        written = (tmp_path / ("array_" + name)).read_bytes()
        assert len(written) >= pts.nbytes
        assert written == (tmp_path / ("cloud_" + name)).read_bytes()
        back = ndtcu.read_point_cloud(str(tmp_path / ("array_" + name)), origin="zero")
        assert np.array_equal(back.points, pts)
    assert cloud.intensity is not None
    ndtcu.write_point_cloud(str(tmp_path / "i.pcd"), cloud)
    back = ndtcu.read_point_cloud(str(tmp_path / "i.pcd"))
    assert np.array_equal(back.intensity, cloud.intensity)
    with pytest.raises(TypeError, match="cloud: expected dtype float32, got float64"):
        ndtcu.write_point_cloud(str(tmp_path / "x.pcd"), pts.astype(np.float64))
    with pytest.raises(ndtcu.IoError, match="writing PLY is not supported"):
        ndtcu.write_point_cloud(str(tmp_path / "x.ply"), pts)


def test_align_equals_cli(sample, cli, truth_poses, backend):
    """Same inputs, same settings (Autoware preset), on each backend: the pose, transform
    and fitness equal the CLI's JSON bit for bit (its doubles are printed to round-trip)."""
    guess = guess_pose(truth_poses)
    target, source = str(sample / "map.pcd"), str(sample / "scans" / f"{SCAN:06d}.pcd")
    out = subprocess.run(
        [cli, "--json", "align", target, source, "--backend", backend, "--init", *[repr(float(v)) for v in guess]],
        check=True, capture_output=True, text=True).stdout
    j = json.loads(out)

    aligner = ndtcu.Aligner(backend=backend)
    assert aligner.backend == backend
    aligner.set_target(ndtcu.read_point_cloud(target))
    r = aligner.align(ndtcu.read_point_cloud(source), guess)

    assert j["iterations"] > 1 and j["backend"] == backend
    assert r.xyzrpy.tolist() == j["xyzrpy"]
    assert r.transform.reshape(-1).tolist() == j["transform"]
    d = r.to_dict()
    for key in ("converged", "reason", "iterations", "score", "tp", "nvtl", "correspondences", "matched_points",
                "source_points", "target_voxels", "oscillation_count", "backend", "evaluations"):
        assert d[key] == j[key], key
        assert getattr(r, key) == j[key], key
    loc, jloc = d["localizability"], j["localizability"]
    assert loc["valid"] and jloc["valid"]
    assert loc["eigenvalues"].tolist() == jloc["eigenvalues"]
    assert loc["directions"].tolist() == jloc["directions"]
    for key in ("condition", "weakest_ratio", "weak", "degenerate"):
        assert loc[key] == jloc[key], key
    assert r.degenerate == jloc["degenerate"]
    assert len(r.trace) == len(j["trace"])
    for a, b in zip(r.trace, j["trace"]):
        assert a["xyzrpy"].tolist() == b["xyzrpy"] and a["score"] == b["score"] and a["step"] == b["step"]
    # It moved towards the true pose: the start is 0.39 m off; the sample's sparse scans (300
    # columns, 2 cm noise) end about 0.13 m off at resolution 2 without a voxel filter.
    assert np.linalg.norm(r.transform[:3, 3] - truth_poses[SCAN][:3, 3]) < 0.2


def test_array_and_cloud_and_batch_agree(sample, truth_poses, backend):
    """A float32 array, the PointCloud it came from, a 4x4 guess, the (6,) pose and one
    hypothesis of align_batch give the same bits (the batch's documented contract), on
    each backend; a map built on either backend has the same bits."""
    aligner = ndtcu.Aligner(backend=backend)
    aligner.set_target(ndtcu.read_point_cloud(str(sample / "map.pcd")))
    scan = ndtcu.read_point_cloud(str(sample / "scans" / f"{SCAN:06d}.pcd"))
    pose = guess_pose(truth_poses)
    r_cloud = aligner.align(scan, pose)
    r_array = aligner.align(np.array(scan.points), pose)
    assert r_cloud.xyzrpy.tolist() == r_array.xyzrpy.tolist()
    batch = aligner.align_batch(scan, np.stack([pose, pose + 0.1]))
    assert batch[0].xyzrpy.tolist() == r_cloud.xyzrpy.tolist()
    assert batch[0].nvtl == r_cloud.nvtl
    # evaluate() at the result scores what the alignment reports there, to rounding: on CUDA
    # the device loop builds the pose's rotation with the device's sin and cos, evaluate()
    # with the host's, and the float32 points they move can differ in a last bit (9.8e-9
    # relative measured on the sample, H100).
    e = aligner.evaluate(scan, r_cloud.transform)
    assert e.iterations == 0
    assert e.nvtl == pytest.approx(r_cloud.nvtl, rel=1e-9 if backend == "cpu" else 1e-7)
    # A VoxelMap built in Python is the map the aligner builds.
    vmap = ndtcu.VoxelMap.build(ndtcu.read_point_cloud(str(sample / "map.pcd")), resolution=2.0, backend=backend)
    assert len(vmap) == len(aligner.target)
    assert np.array_equal(vmap.means, aligner.target.means)
    assert np.array_equal(vmap.inverse_covariances, aligner.target.inverse_covariances)
    other = ndtcu.Aligner(backend=backend)
    other.set_target(vmap)
    assert other.align(scan, pose).xyzrpy.tolist() == r_cloud.xyzrpy.tolist()
    # The map of a plain array (read where it lies) is the map of the cloud holding it.
    cloud = ndtcu.read_point_cloud(str(sample / "map.pcd"))
    array = np.array(cloud.points)  # a copy of its own, in numpy's memory
    from_array = ndtcu.VoxelMap.build(array, resolution=2.0, backend=backend)
    from_cloud = ndtcu.VoxelMap.build(ndtcu.PointCloud(array), resolution=2.0, backend="cpu")
    assert len(from_array) == len(from_cloud)
    assert np.array_equal(from_array.means, from_cloud.means)
    assert np.array_equal(from_array.inverse_covariances, from_cloud.inverse_covariances)


def test_points_are_not_copied(sample, truth_poses):
    """`points` is a view of the cloud's memory: the same address every time, writes go to
    the cloud, and align() sees them (a copy taken earlier would not)."""
    scan = ndtcu.read_point_cloud(str(sample / "scans" / f"{SCAN:06d}.pcd"))
    a, b = scan.points, scan.points
    assert a.ctypes.data == b.ctypes.data
    assert not a.flags["OWNDATA"]
    aligner = ndtcu.Aligner(backend="cpu")
    aligner.set_target(ndtcu.read_point_cloud(str(sample / "map.pcd")))
    pose = guess_pose(truth_poses)
    before = aligner.align(scan, pose)
    saved = np.array(a)
    a[:, 2] += 0.5  # lift the scan by half a metre, through the view
    assert scan.points[0, 2] == saved[0, 2] + np.float32(0.5)
    lifted = aligner.align(scan, pose)
    assert lifted.xyzrpy.tolist() != before.xyzrpy.tolist()
    a[:] = saved
    assert aligner.align(scan, pose).xyzrpy.tolist() == before.xyzrpy.tolist()


def test_array_views_give_the_bits_of_the_cloud(sample, truth_poses, backend):
    """An array is read where it lies, whatever array holds it: rows in the middle of a
    larger array (a C-contiguous slice that does not own its memory) and a read-only array
    give the bits of the PointCloud they came from in every call that reads a scan, on
    each backend."""
    aligner = ndtcu.Aligner(backend=backend)
    aligner.set_target(ndtcu.read_point_cloud(str(sample / "map.pcd")))
    scan = ndtcu.read_point_cloud(str(sample / "scans" / f"{SCAN:06d}.pcd"))
    assert scan.origin.tolist() == [0.0, 0.0, 0.0]  # an array's origin is zero
    n = len(scan)
    big = np.full((n + 10, 3), np.nan, np.float32)  # NaN rows around it: a read past its ends would fail
    big[7:7 + n] = scan.points
    inner = big[7:7 + n]
    assert inner.flags["C_CONTIGUOUS"] and not inner.flags["OWNDATA"]
    frozen = np.array(scan.points)
    frozen.flags.writeable = False
    pose = guess_pose(truth_poses)
    poses = np.stack([pose, pose + 0.1])
    expected = aligner.align(scan, pose)
    expected_eval = aligner.evaluate(scan, expected.transform)
    expected_batch = aligner.align_batch(scan, poses)
    around = ndtcu.matrix_to_pose(truth_poses[SCAN]) + np.array([0.6, -0.4, 0.0, 0.0, 0.0, 0.1])
    expected_search = ndtcu.find_initial_pose(aligner, scan, around, radius=1.0, yaw_range_deg=30.0, refine_count=4)
    for name, points in (("slice", inner), ("read-only", frozen)):
        r = aligner.align(points, pose)
        assert r.xyzrpy.tolist() == expected.xyzrpy.tolist(), name
        assert (r.nvtl, r.score, r.iterations) == (expected.nvtl, expected.score, expected.iterations), name
        e = aligner.evaluate(points, expected.transform)
        assert (e.nvtl, e.score, e.matched_points) == (
            expected_eval.nvtl, expected_eval.score, expected_eval.matched_points), name
        for got, want in zip(aligner.align_batch(points, poses), expected_batch):
            assert got.xyzrpy.tolist() == want.xyzrpy.tolist() and got.nvtl == want.nvtl, name
        found = ndtcu.find_initial_pose(aligner, points, around, radius=1.0, yaw_range_deg=30.0, refine_count=4)
        assert found.xyzrpy.tolist() == expected_search.xyzrpy.tolist(), name
        assert found.nvtl == expected_search.nvtl, name
        assert found.hypotheses_aligned == expected_search.hypotheses_aligned, name


# Run in a fresh interpreter, so that its peak resident memory (VmHWM) is this script's: a
# scan of 1M points (12 MB), each call's growth of the peak, then a PointCloud made from the
# scan (a copy by definition), which must show up. The peak is reset before each call where
# the kernel lets a process do so (clear_refs 5), else it stands from before, which can only
# hide growth (the copy check then fails). getrusage's ru_maxrss would not do: Linux carries
# it over from the process that ran pytest, through fork and exec. The map is a 6 m cube the
# scan mostly misses, so each evaluation reads every point but costs little.
PEAK_SCRIPT = r"""
import json
import sys
import numpy as np
import ndtcu

OUT = sys.argv[1]  # a folder to write into

def status(key):  # bytes
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024

def reset_peak():
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass

rng = np.random.default_rng(3)
target = rng.random((20000, 3), dtype=np.float32)
target *= 6.0
target -= 3.0
aligner = ndtcu.Aligner(backend="cpu", threads=2, max_iterations=3)
aligner.set_target(target)
scan = rng.random((1000000, 3), dtype=np.float32)  # generated in place: no float64 array first
scan *= 30.0
scan -= 15.0
guess = ndtcu.pose_to_matrix(np.array([0.2, -0.1, 0.0, 0.0, 0.0, 0.02]))
poses = np.array([[0.2, -0.1, 0.0, 0.0, 0.0, 0.02], [0.0, 0.0, 0.0, 0.0, 0.0, 0.0]])
calls = {
    "align": lambda: aligner.align(scan, guess),
    "align pose": lambda: aligner.align(scan, poses[0]),
    "evaluate": lambda: aligner.evaluate(scan, guess),
    "align_batch": lambda: aligner.align_batch(scan, poses),
    "find_initial_pose": lambda: ndtcu.find_initial_pose(aligner, scan, guess, radius=0.0, yaw_range_deg=30.0,
                                                         refine_count=2),
    "crop_range": lambda: ndtcu.crop_range(scan, 0.0, 1.0),
    "PointCloud": lambda: kept.append(ndtcu.PointCloud(scan)),  # last: its copy stays
}
kept = []
growth = {}

def measure(call):
    reset_peak()
    before = status("VmHWM")
    call()
    return status("VmHWM") - before

for name, call in calls.items():
    growth[name] = measure(call)
# The filters and the localizer work in memory of their own (a sort index, the cropped
# cloud): an array must cost what the same points in a PointCloud cost, not a copy more.
cloud = kept[0]
settings = ndtcu.LocalizerSettings()
# backend "cpu": host memory is measured, no CUDA context to set up on the first call.
localizer = ndtcu.Localizer(settings, backend="cpu", voxel_leaf=1.0, max_range=10.0, recovery="none")
localizer.set_map(target)
localizer.set_initial_pose(np.eye(4))
pairs = {
    "voxel_downsample": (lambda: ndtcu.voxel_downsample(scan, 0.5), lambda: ndtcu.voxel_downsample(cloud, 0.5)),
    "localize": (lambda: localizer.localize(scan, 0.0), lambda: localizer.localize(cloud, 0.1)),
    "write_point_cloud": (lambda: ndtcu.write_point_cloud(OUT + "/a.pcd", scan),
                          lambda: ndtcu.write_point_cloud(OUT + "/c.pcd", cloud)),
}
paired = {name: [measure(array_call), measure(cloud_call)] for name, (array_call, cloud_call) in pairs.items()}
print(json.dumps({"bytes": scan.nbytes, "growth": growth, "pairs": paired}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the peak resident memory as Linux reports it")
def test_arrays_are_not_copied(tmp_path):
    """The calls that read a scan take a float32 array without copying it: none raises the
    process's peak memory by anything near the array's size, while PointCloud(array), whose
    copy is the point, raises it by at least three quarters of it (so the measure would see
    a copy). The filters, Localizer.localize and write_point_cloud, which need memory of
    their own, cost no more with the array than with a PointCloud of the same points."""
    out = subprocess.run([sys.executable, "-c", PEAK_SCRIPT, str(tmp_path)], check=True, capture_output=True,
                         text=True, env=dict(os.environ)).stdout
    j = json.loads(out)
    size, growth = j["bytes"], j["growth"]
    assert growth.pop("PointCloud") >= 0.75 * size, j
    for name, grew in growth.items():
        assert grew < 0.25 * size, (name, j)
    for name, (with_array, with_cloud) in j["pairs"].items():
        assert with_array < with_cloud + 0.25 * size, (name, j)


def test_score_batch(sample, truth_poses, backend):
    """score_batch gives each pose the score, NVTL and counts evaluate() gives it, bit for
    bit, as (K,) arrays; a pose far from the map matches nothing."""
    aligner = ndtcu.Aligner(backend=backend)
    aligner.set_target(ndtcu.read_point_cloud(str(sample / "map.pcd")))
    scan = ndtcu.read_point_cloud(str(sample / "scans" / f"{SCAN:06d}.pcd"))
    truth = truth_poses[SCAN]
    moved = ndtcu.pose_to_matrix(ndtcu.matrix_to_pose(truth) + OFFSET)
    far = truth.copy()
    far[0, 3] += 1000.0
    transforms = np.stack([truth, moved, far])
    s = aligner.score_batch(scan, transforms)
    assert sorted(s) == ["correspondences", "matched_points", "nvtl", "score"]
    assert s["score"].shape == (3,) and s["nvtl"].dtype == np.float64 and s["matched_points"].dtype == np.uint64
    for k in range(2):
        e = aligner.evaluate(scan, transforms[k])
        assert (s["score"][k], s["nvtl"][k]) == (e.score, e.nvtl)
        assert (s["correspondences"][k], s["matched_points"][k]) == (e.correspondences, e.matched_points)
    assert s["nvtl"][0] > s["nvtl"][1] > 0.0
    assert s["matched_points"][2] == 0 and s["nvtl"][2] == 0.0
    as_poses = aligner.score_batch(np.array(scan.points), np.stack([ndtcu.matrix_to_pose(t) for t in transforms]))
    assert np.array_equal(as_poses["nvtl"], s["nvtl"])
    with pytest.raises(ValueError, match=r"^poses: expected shape \(K, 4, 4\) or \(K, 6\), got \(2, 5\)"):
        aligner.score_batch(scan, np.zeros((2, 5)))


@pytest.mark.parametrize(
    "value, error, message",
    [
        (np.zeros((5, 3)), TypeError, "source: expected dtype float32, got float64"),
        (np.zeros((5, 3), np.int32), TypeError, "source: expected dtype float32, got int32"),
        (np.zeros((5, 4), np.float32), ValueError, "source: expected shape (N, 3), got (5, 4)"),
        (np.zeros(15, np.float32), ValueError, "source: expected shape (N, 3), got (15,)"),
        (np.zeros((3, 5), np.float32).T, ValueError, "source: the array is not C-contiguous"),
        (np.zeros((10, 3), np.float32)[::2], ValueError, "source: the array is not C-contiguous"),
        # One row of a transposed array: its three values are 5 floats apart.
        (np.zeros((3, 5), np.float32).T[:1], ValueError, "source: the array is not C-contiguous"),
        ([[0.0, 0.0, 0.0]], TypeError, "source: expected a float32 numpy array of shape (N, 3) or an ndtcu.PointCloud, got list"),
    ],
)
def test_bad_arrays(value, error, message):
    aligner = ndtcu.Aligner(backend="cpu")
    with pytest.raises(error) as e:
        aligner.align(value)
    assert message in str(e.value)


def test_every_point_argument_is_checked(sample):
    """Each entry point names its own argument."""
    bad = np.zeros((4, 3))
    aligner = ndtcu.Aligner(backend="cpu")
    calls = {
        "target": lambda: aligner.set_target(bad),
        "points": lambda: ndtcu.VoxelMap.build(bad),
        "cloud": lambda: ndtcu.voxel_downsample(bad, 1.0),
        "map": lambda: ndtcu.Localizer().set_map(bad),
    }
    for name, call in calls.items():
        with pytest.raises(TypeError, match=f"^{name}: expected dtype float32, got float64"):
            call()
    with pytest.raises(ValueError, match=r"^guesses: expected shape \(K, 4, 4\) or \(K, 6\), got \(2, 5\)"):
        aligner.align_batch(np.zeros((4, 3), np.float32), np.zeros((2, 5)))


def test_errors_become_exceptions(sample):
    with pytest.raises(ndtcu.IoError, match="no_such_file.pcd"):
        ndtcu.read_point_cloud(str(sample / "no_such_file.pcd"))
    with pytest.raises(ndtcu.Error, match="resolution"):
        ndtcu.Aligner(resolution=-1.0)
    with pytest.raises(ndtcu.Error, match="no target"):
        ndtcu.Aligner(backend="cpu").align(np.zeros((10, 3), np.float32))
    with pytest.raises(TypeError, match="unknown setting 'resolutoin'"):
        ndtcu.Aligner(resolutoin=1.0)
    with pytest.raises(ValueError, match=r"guess: expected shape \(4, 4\), got \(3, 3\)"):
        ndtcu.Aligner(backend="cpu").align(np.zeros((10, 3), np.float32), np.eye(3))
    assert issubclass(ndtcu.IoError, ndtcu.Error) and issubclass(ndtcu.Error, RuntimeError)


def test_gil_released_while_aligning(sample):
    """A Python thread keeps running while another thread's align() is inside C++.

    One long call (the map aligned to itself, every iteration run, one worker thread) is
    cut into ten equal slices; the main thread, spinning meanwhile, must tick in at least
    eight of them. Were the GIL held through the call, the main thread could not run
    between the call's first and last bytecode: at most the first slice would hold ticks.
    """
    cloud = ndtcu.read_point_cloud(str(sample / "map.pcd"))
    aligner = ndtcu.Aligner(backend="cpu", threads=1, max_iterations=10, epsilon=0.0)
    aligner.set_target(cloud)
    guess = ndtcu.pose_to_matrix(np.array([0.3, 0.2, 0.0, 0.0, 0.0, 0.02]))
    span = {}

    def work():
        span["start"] = time.perf_counter()
        span["result"] = aligner.align(cloud, guess)
        span["end"] = time.perf_counter()

    ticks = []
    t = threading.Thread(target=work)
    t.start()
    while t.is_alive():
        ticks.append(time.perf_counter())
    t.join()
    duration = span["end"] - span["start"]
    assert span["result"].iterations == 10
    assert duration > 0.1, f"the alignment took {duration:.3f} s: too short to tell"
    slices = {int(10 * (x - span["start"]) / duration) for x in ticks if span["start"] < x < span["end"]}
    assert len(slices) >= 8, f"the main thread ran in {len(slices)} of 10 slices of a {duration:.2f} s alignment"


def test_threads_sharing_an_aligner_wait_for_each_other(sample, truth_poses, backend):
    """The GIL is released while aligning and an Aligner takes one call at a time: two
    threads calling one Aligner get the results of calling it one after the other."""
    aligner = ndtcu.Aligner(backend=backend, threads=2)
    aligner.set_target(ndtcu.read_point_cloud(str(sample / "map.pcd")))
    scans = [ndtcu.read_point_cloud(str(sample / "scans" / f"{i:06d}.pcd")) for i in (2, 5)]
    guesses = [ndtcu.matrix_to_pose(truth_poses[i]) + OFFSET for i in (2, 5)]
    expected = [aligner.align(s, g).xyzrpy.tolist() for s, g in zip(scans, guesses)]
    got = [[], []]

    def work(k):
        for _ in range(8):
            got[k].append(aligner.align(scans[k], guesses[k]).xyzrpy.tolist())

    # Daemon threads with a time limit: unguarded, the two calls tangled the aligner's
    # worker pool and never returned (seen without the lock).
    threads = [threading.Thread(target=work, args=(k,), daemon=True) for k in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "the threads did not finish within 120 s"
    assert got[0] == [expected[0]] * 8
    assert got[1] == [expected[1]] * 8


def test_limits_refused_before_the_work(sample):
    """Issue 26: find_initial_pose(radius=1e6) ran on and max_iterations=1e8 ran out of memory;
    both are refused at once, through the library's own checks, naming the value and limit."""
    import time

    aligner = ndtcu.Aligner(backend="cpu", threads=1)
    aligner.set_target(ndtcu.read_point_cloud(str(sample / "map.pcd")))
    scan = ndtcu.read_point_cloud(str(sample / "scans" / "000000.pcd"))
    around = np.array([-24.0, 18.4, 1.3, 0.0, 0.0, -1.71])
    t0 = time.monotonic()
    with pytest.raises(ndtcu.Error, match=r"radius 1000000 m .* exceed the limit of 100000"):
        ndtcu.find_initial_pose(aligner, scan, around, radius=1e6)
    with pytest.raises(ndtcu.Error, match=r"yaw_step_deg 1e-07\) exceed the limit of 100000"):
        ndtcu.find_initial_pose(aligner, scan, around, radius=0.0, yaw_step_deg=1e-7)
    with pytest.raises(ndtcu.Error, match=r"max_iterations: 100000000 \(must be in \[1, 1000\]\)"):
        ndtcu.Aligner(backend="cpu", max_iterations=100_000_000)
    assert time.monotonic() - t0 < 2.0


def test_initial_pose_search(sample, truth_poses):
    aligner = ndtcu.Aligner(backend="cpu")
    aligner.set_target(ndtcu.read_point_cloud(str(sample / "map.pcd")))
    scan = ndtcu.read_point_cloud(str(sample / "scans" / f"{SCAN:06d}.pcd"))
    around = truth_poses[SCAN].copy()
    around[:3, 3] += [1.2, -0.8, 0.0]
    r = ndtcu.find_initial_pose(aligner, scan, around, radius=2.0, yaw_range_deg=60.0)
    assert r.verdict() == "found"
    # 1.4 m off at the start; it ends where align() ends from nearby (about 0.15 m off, see
    # test_align_equals_cli), not at a grid point a metre away.
    assert np.linalg.norm(r.transform[:3, 3] - truth_poses[SCAN][:3, 3]) < 0.25
    assert r.hypotheses_aligned == r.coarse_hypotheses + r.refined_hypotheses


def test_initial_pose_search_equals_cli(sample, cli, truth_poses, backend):
    """find_initial_pose on the scan voxel-filtered in Python gives `ndtcu initpose --json`'s
    pose, fitness and hypothesis counts bit for bit (the CLI filters with --scan-voxel 1)."""
    around = ndtcu.matrix_to_pose(truth_poses[SCAN]) + np.array([1.2, -0.8, 0.0, 0.0, 0.0, 0.3])
    map_path, scan_path = str(sample / "map.pcd"), str(sample / "scans" / f"{SCAN:06d}.pcd")
    out = subprocess.run(
        [cli, "--json", "initpose", "--map", map_path, "--scan", scan_path, "--backend", backend, "--scan-voxel", "1",
         "--radius", "2", "--yaw-range", "90", "--around", *[repr(float(v)) for v in around]],
        check=True, capture_output=True, text=True).stdout
    j = json.loads(out)
    aligner = ndtcu.Aligner(backend=backend)
    aligner.set_target(ndtcu.read_point_cloud(map_path))
    scan = ndtcu.voxel_downsample(ndtcu.read_point_cloud(scan_path), 1.0)
    assert len(scan) == j["scan_points"]
    r = ndtcu.find_initial_pose(aligner, scan, around, radius=2.0, yaw_range_deg=90.0)
    assert r.verdict() == j["verdict"] == "found"
    assert r.xyzrpy.tolist() == j["xyzrpy"]
    for key in ("nvtl", "tp", "score", "converged", "iterations", "hypotheses_aligned", "coarse_hypotheses",
                "refined_hypotheses", "screened_hypotheses", "has_rival", "ambiguous", "ambiguity_nvtl"):
        assert getattr(r, key) == j[key], key
    if j["rival_xyzrpy"] is not None:
        assert r.rival_xyzrpy.tolist() == j["rival_xyzrpy"]


def test_global_search_equals_cli(sample, cli, truth_poses, backend):
    """InitialPoseSearch finds the sample's scan with no pose, as `ndtcu initpose --global`
    does: the same pose, verdict and candidates, bit for bit."""
    map_path, scan_path = str(sample / "map.pcd"), str(sample / "scans" / f"{SCAN:06d}.pcd")
    out = subprocess.run(
        [cli, "--json", "initpose", "--map", map_path, "--scan", scan_path, "--backend", backend, "--global"],
        check=True, capture_output=True, text=True).stdout
    j = json.loads(out)
    aligner = ndtcu.Aligner(backend=backend)
    aligner.set_target(ndtcu.read_point_cloud(map_path))
    # The CLI polishes the found pose at half the resolution (--refine-ratio 0.5).
    fine = ndtcu.Aligner(backend=backend, resolution=1.0)
    fine.set_target(ndtcu.read_point_cloud(map_path))
    search = ndtcu.InitialPoseSearch(aligner, fine=fine)
    scan = ndtcu.voxel_downsample(ndtcu.read_point_cloud(scan_path), 1.0)
    r = search.find(scan)
    assert r.status() == j["status"] == "found"
    assert r.refined == j["refined"]
    assert r.search.cell == j["search"]["cell"] == 1.0
    assert r.xyzrpy.tolist() == j["xyzrpy"]
    assert np.linalg.norm(r.transform[:3, 3] - truth_poses[SCAN][:3, 3]) < 0.25
    assert [c.xyzrpy.tolist() for c in r.candidates] == [c["xyzrpy"] for c in j["candidates"]]
    assert r.search.nodes_scored == j["search"]["nodes_scored"] > 0
    assert r.search.nodes_scored < r.search.brute_force_leaves
    assert r.search.tilts == j["search"]["tilts"] == 1
    # 6-DoF, as `--tilt 2 --tilt-step 2`: five attitudes per yaw, the same place.
    out6 = subprocess.run(
        [cli, "--json", "initpose", "--map", map_path, "--scan", scan_path, "--backend", backend, "--global",
         "--tilt", "2", "--tilt-step", "2"], check=True, capture_output=True, text=True).stdout
    j6 = json.loads(out6)
    r6 = ndtcu.InitialPoseSearch(aligner, tilt_deg=2.0, tilt_step_deg=2.0, fine=fine).find(scan)
    assert r6.search.tilts == j6["search"]["tilts"] == 5
    assert r6.xyzrpy.tolist() == j6["xyzrpy"]
    assert r6.status() == "found"
    assert np.linalg.norm(r6.transform[:3, 3] - truth_poses[SCAN][:3, 3]) < 0.25
    with pytest.raises(ndtcu.Error, match="tilt_deg"):
        ndtcu.InitialPoseSearch(aligner, tilt_deg=45.0)
    # A region that leaves the scan's place out finds nothing there.
    far = r.xyzrpy.copy()
    far[0] += 500.0
    assert search.find(scan, around=far, radius=5.0).status() == "not_found"
    with pytest.raises(ndtcu.Error, match="radius"):
        search.find(scan, around=far)


def test_localizer_follows_the_sample_sequence(sample, truth_poses, backend, cli, tmp_path):
    """Every frame of the sample sequence tracked within 10 cm of the truth, on each backend,
    with the trajectory `ndtcu localize` writes for the same scans, times, start and
    settings, byte for byte."""
    settings = ndtcu.LocalizerSettings()
    loc = ndtcu.Localizer(settings, ndtcu.ExecutionOptions(backend=backend), voxel_leaf=1.0)
    assert loc.backend == backend and loc.execution.backend == backend
    loc.set_map(ndtcu.read_point_cloud(str(sample / "map.pcd")))
    start = ndtcu.matrix_to_pose(truth_poses[0])
    loc.set_initial_pose(ndtcu.pose_to_matrix(start))  # as --init builds it from the six numbers
    times = np.loadtxt(sample / "poses_tum.txt")[:, 0]
    paths = [sample / "scans" / f"{i:06d}.pcd" for i in range(len(truth_poses))]
    tum = []
    for i, truth in enumerate(truth_poses):
        f = loc.localize(ndtcu.read_point_cloud(str(paths[i])), float(times[i]))
        assert f.valid and f.status in ("tracked", "recovered"), (i, f.status)
        assert np.linalg.norm(f.pose[:3, 3] - truth[:3, 3]) < 0.1, i
        tum.append(ndtcu.tum_line(float(times[i]), f.pose) + "\n")
    scan_list = tmp_path / "scans.txt"
    scan_list.write_text("".join(f"{p} {t:.6f}\n" for p, t in zip(paths, times)))
    subprocess.run([cli, "localize", "--map", str(sample / "map.pcd"), "--scans", str(scan_list), "--backend", backend,
                    "--voxel", "1", "--init", *[repr(float(v)) for v in start], "--no-plot", "--out",
                    str(tmp_path / "cli")], check=True, capture_output=True)
    assert (tmp_path / "cli" / "trajectory_tum.txt").read_text() == "".join(tum)


def test_run_command_is_the_command_line_tool(sample, backend, cli, tmp_path):
    """ndtcu.run_command runs `ndtcu localize` in this process: the files of the tool run
    with the same arguments (the trajectories byte for byte); its errors are exceptions and
    check_command parses without running."""
    args = ["localize", "--map", str(sample / "map.pcd"), "--scans", str(sample / "scans"), "--init-from",
            str(sample / "poses_tum.txt"), "--backend", backend, "--threads", "2", "--no-plot", "-q"]
    assert ndtcu.run_command(args + ["--out", str(tmp_path / "py")]) == 0
    subprocess.run([cli, *args, "--out", str(tmp_path / "cli")], check=True, capture_output=True)
    for name in ("trajectory_tum.txt", "trajectory_kitti.txt"):
        assert (tmp_path / "py" / name).read_bytes() == (tmp_path / "cli" / name).read_bytes()
    summary = json.loads((tmp_path / "py" / "summary.json").read_text())
    assert summary["frames"] == 10 and summary["backend"] == backend
    assert (summary["cuda_device"] is None) == (backend == "cpu")
    with pytest.raises(ndtcu.IoError, match="missing.pcd"):
        ndtcu.run_command(["localize", "--map", str(tmp_path / "missing.pcd"), "--scans", str(sample / "scans"),
                           "--out", str(tmp_path / "x"), "--no-plot", "-q"])
    with pytest.raises(ValueError, match="--voxle"):
        ndtcu.check_command(args[:5] + ["--voxle", "1"])
    with pytest.raises(ValueError, match="--voxel: value -1 must be >= 0"):
        ndtcu.check_command(args[:5] + ["--voxel", "-1"])
    ndtcu.check_command(args + ["--out", str(tmp_path / "checked")])
    assert not (tmp_path / "checked").exists()  # parsed, not run


def test_device_setting():
    assert ndtcu.ExecutionOptions().device == -1 and "device=-1" in repr(ndtcu.ExecutionOptions())
    assert ndtcu.Aligner(backend="cpu", device=3).execution.device == 3  # the CPU backend runs on no device
    with pytest.raises(ndtcu.Error, match="device: -2"):
        ndtcu.Aligner(device=-2)
    with pytest.raises(ndtcu.Error, match="device: -2"):
        ndtcu.Localizer(ndtcu.LocalizerSettings(), ndtcu.ExecutionOptions(device=-2))
    count = len(ndtcu.cuda_devices())
    if count:
        with pytest.raises(ndtcu.Error, match=f"device {count}: no such CUDA device \\({count}"):
            ndtcu.Aligner(backend="cuda", device=count)


def test_settings_presets_and_keywords():
    s = ndtcu.AlignSettings.preset("pcl")
    e = ndtcu.ExecutionOptions(backend="cpu")
    a = ndtcu.Aligner(s, e, max_iterations=5, search="direct7", threads=2)
    got = a.settings
    assert (got.resolution, got.line_search, got.covariance, got.convergence) == (1.0, "more-thuente", "pcl", "pcl")
    assert (got.max_iterations, got.search) == (5, "direct7")
    assert (a.execution.backend, a.execution.threads, a.backend) == ("cpu", 2, "cpu")
    assert s.max_iterations == 35 and e.threads == 0  # the settings given are not changed
    assert "max_iterations=5, " in repr(got) and "search='direct7'" in repr(got)
    assert repr(a.execution) == "ExecutionOptions(backend='cpu', threads=2, device=-1, gpu_loop='device')"
    # How it runs is not a setting of the NDT math, and neither takes a name it lacks.
    assert not hasattr(s, "backend") and not hasattr(s, "threads")
    with pytest.raises(TypeError, match="unknown setting 'threds'"):
        ndtcu.Aligner(threds=2)
    with pytest.raises(TypeError, match="unknown setting 'resolution'"):
        ndtcu.ExecutionOptions(resolution=1.0)
    with pytest.raises(ndtcu.Error, match="direct8"):
        s.search = "direct8"
    with pytest.raises(ndtcu.Error, match="GPU Newton loop"):
        e.gpu_loop = "graph"


def test_localizer_takes_a_prediction_and_the_aligner_a_prior(sample, truth_poses):
    """A caller's prediction and covariance replace the motion model (the frame reports them
    and its Mahalanobis distance); a pose prior set through the settings pulls the result."""
    loc = ndtcu.Localizer(ndtcu.LocalizerSettings(), voxel_leaf=1.0)
    loc.set_map(ndtcu.read_point_cloud(str(sample / "map.pcd")))
    loc.set_initial_pose(truth_poses[0])
    times = np.loadtxt(sample / "poses_tum.txt")[:, 0]
    cov = np.diag([0.5**2] * 3 + [0.05**2] * 3)
    for i, truth in enumerate(truth_poses[:4]):
        predicted = truth.copy()
        predicted[0, 3] += 0.3
        f = loc.localize(ndtcu.read_point_cloud(str(sample / "scans" / f"{i:06d}.pcd")), float(times[i]), predicted, cov)
        assert f.valid and f.decided_by == "passed", (i, f.status, f.decided_by)
        assert np.allclose(f.prediction, predicted) and np.allclose(f.prediction_covariance, cov)
        if i > 0:  # gated once a good pose is known: about (0.3 / 0.5)^2
            assert 0.2 < f.mahalanobis2 < 0.6, (i, f.mahalanobis2)
    with pytest.raises(ValueError, match="together"):
        loc.localize(ndtcu.read_point_cloud(str(sample / "scans" / "000004.pcd")), float(times[4]), truth_poses[4])
    with pytest.raises(ndtcu.Error, match="positive semi-definite"):
        loc.localize(ndtcu.read_point_cloud(str(sample / "scans" / "000004.pcd")), float(times[4]), truth_poses[4],
                     -np.eye(6))
    # The sweep's motion: six finite numbers; a scan without per-point times is used as it is.
    with pytest.raises(ValueError, match="6 numbers"):
        loc.localize(ndtcu.read_point_cloud(str(sample / "scans" / "000004.pcd")), float(times[4]),
                     sweep_motion=[1.0, 0.0, 0.0])
    with pytest.raises(ndtcu.Error, match="angular.y is nan"):
        loc.localize(ndtcu.read_point_cloud(str(sample / "scans" / "000004.pcd")), float(times[4]), truth_poses[4],
                     cov, sweep_motion=[1.0, 0.0, 0.0, 0.0, float("nan"), 0.0])
    f = loc.localize(ndtcu.read_point_cloud(str(sample / "scans" / "000004.pcd")), float(times[4]),
                     sweep_motion=[1.0, 0.0, 0.0, 0.0, 0.0, 0.1])
    assert f.valid and not f.deskewed, (f.status, f.deskewed)
    # ... or in parts: a dict of their begins, the last one's end and six numbers each.
    scan4 = ndtcu.read_point_cloud(str(sample / "scans" / "000004.pcd"))
    parts = {"begin": [0.0, 0.05], "end": 0.1, "motion": [[1.0, 0.0, 0.0, 0.0, 0.0, 0.1]] * 2}
    with pytest.raises(ValueError, match="not both"):
        loc.localize(scan4, float(times[4]), sweep_motion=[1.0, 0.0, 0.0, 0.0, 0.0, 0.1], sweep_motion_parts=parts)
    with pytest.raises(ValueError, match="no 'end'"):
        loc.localize(scan4, float(times[4]), sweep_motion_parts={"begin": parts["begin"], "motion": parts["motion"]})
    with pytest.raises(ValueError, match=r"\['motion'\]\[1\] must hold 6 numbers"):
        loc.localize(scan4, float(times[4]), sweep_motion_parts=dict(parts, motion=[[1.0] * 6, [1.0] * 5]))
    with pytest.raises(ndtcu.Error, match=r"\(part 1\): angular.y is nan"):
        loc.localize(scan4, float(times[4]),
                     sweep_motion_parts=dict(parts, motion=[[1.0] * 6, [1.0, 0.0, 0.0, 0.0, float("nan"), 0.0]]))
    f = loc.localize(scan4, float(times[4]), sweep_motion_parts=parts)
    assert f.valid and not f.deskewed, (f.status, f.deskewed)

    scan = ndtcu.read_point_cloud(str(sample / "scans" / "000002.pcd"))
    target = ndtcu.read_point_cloud(str(sample / "map.pcd"))
    free = ndtcu.Aligner(backend="cpu")
    free.set_target(target)
    start = truth_poses[2]
    r_free = free.align(scan, start)
    pulled_pose = ndtcu.matrix_to_pose(start)
    pulled_pose[2] += 0.5  # half a metre up, held at 1 mm
    info = np.zeros((6, 6))
    info[2, 2] = 1e8
    held = ndtcu.Aligner(backend="cpu", prior_pose=pulled_pose, prior_information=info)
    assert np.allclose(held.settings.prior_information, info) and "prior_pose=" in repr(held.settings)
    held.set_target(target)
    r_held = held.align(scan, start)
    assert abs(r_held.xyzrpy[2] - pulled_pose[2]) < 0.01
    assert abs(r_free.xyzrpy[2] - pulled_pose[2]) > 0.4
    with pytest.raises(ndtcu.Error, match="symmetric"):
        bad = info.copy()
        bad[0, 1] = 1.0
        ndtcu.Aligner(backend="cpu", prior_information=bad)


def test_paths_as_str_bytes_and_pathlike(sample, tmp_path):
    """Every path argument takes str, bytes and os.PathLike (pathlib.Path was a TypeError),
    and a file name that is not UTF-8 is reached through bytes or os.fsdecode's str."""
    path = sample / "scans" / "000003.pcd"
    expected = ndtcu.read_point_cloud(str(path)).points
    for given in (path, bytes(path), os.fsencode(str(path)), str(path)):
        assert np.array_equal(ndtcu.read_point_cloud(given).points, expected), type(given)
    with pytest.raises(TypeError, match=r"^path: expected a path \(str, bytes or os.PathLike\), got int"):
        ndtcu.read_point_cloud(3)
    with pytest.raises(ValueError, match="^path: the path holds a null byte"):
        ndtcu.read_point_cloud(b"scan\0.pcd")
    cloud = ndtcu.read_point_cloud(path)
    odd = os.fsencode(str(tmp_path)) + b"/scan_\xff\xfe.pcd"  # not UTF-8
    ndtcu.write_point_cloud(odd, cloud)
    assert os.path.exists(odd)
    assert np.array_equal(ndtcu.read_point_cloud(os.fsdecode(odd)).points, cloud.points)
    ndtcu.write_point_cloud(tmp_path / "as_path.pcd", cloud)
    assert np.array_equal(ndtcu.read_point_cloud(tmp_path / "as_path.pcd").points, cloud.points)
    # An error naming such a file is readable (bytes that are not UTF-8 shown as \xNN),
    # not a UnicodeDecodeError.
    with pytest.raises(ndtcu.IoError, match=r"missing_\\xFF\.pcd: no such file"):
        ndtcu.read_point_cloud(os.fsencode(str(tmp_path)) + b"/missing_\xff.pcd")


def test_command_arguments_as_str_bytes_and_pathlike(sample, tmp_path):
    """run_command and check_command take each argument as str, bytes or os.PathLike, as
    the other calls take paths: a file name that is not UTF-8, as os.fsdecode spells it,
    raised TypeError."""
    odd = os.fsencode(str(tmp_path)) + b"/caf\xe9.pcd"  # Latin-1: not UTF-8
    ndtcu.write_point_cloud(odd, ndtcu.read_point_cloud(sample / "scans" / "000003.pcd"))
    for given in (os.fsdecode(odd), odd):
        assert ndtcu.run_command(["info", given, "-q"]) == 0, type(given)
    assert ndtcu.run_command([b"info", sample / "map.pcd", "-q"]) == 0
    ndtcu.check_command(["info", os.fsdecode(odd)])
    with pytest.raises(ndtcu.IoError, match=r"missing_\\xE9\.pcd: no such file"):
        ndtcu.run_command(["info", os.fsdecode(os.fsencode(str(tmp_path)) + b"/missing_\xe9.pcd")])
    with pytest.raises(TypeError, match=r"^args\[1\]: expected a path \(str, bytes or os.PathLike\), got int"):
        ndtcu.run_command(["info", 3])
    with pytest.raises(TypeError, match="got one string"):
        ndtcu.check_command("info")
    config = os.fsencode(str(tmp_path)) + b"/p\xe9.yaml"
    with open(config, "w") as f:
        f.write("/**:\n  ros__parameters:\n    ndt:\n      resolution: 2.0\n")
    ndtcu.check_autoware_config(os.fsdecode(config))
    ndtcu.check_autoware_config(config)


def test_bag_topics_that_are_not_utf8_are_reached_as_bytes(sample, tmp_path):
    """A topic name that is not UTF-8 raised UnicodeDecodeError when listed, and could not be
    named to read it: it is listed as bytes, and bytes reach it. The bag path may be a
    pathlib.Path."""
    pytest.importorskip("rosbags")
    pytest.importorskip("mcap")
    script = pathlib.Path(__file__).resolve().parents[1] / "rosbag" / "write_bags.py"
    subprocess.run([sys.executable, str(script), str(tmp_path), "--scans", str(sample / "scans"), "--times",
                    str(sample / "poses_tum.txt"), "--only", "mcap"], check=True, capture_output=True)
    bag = tmp_path / "sample_mcap"
    (mcap_file,) = bag.glob("*.mcap")
    data = mcap_file.read_bytes()
    assert b"/points" in data
    odd = b"/p\xffints"  # same length: every record keeps its size
    mcap_file.write_bytes(data.replace(b"/points", odd))

    reader = ndtcu.BagReader(bag)
    assert reader.path == str(bag)
    names = [t["name"] for t in reader.topics]
    assert odd in names and "/notes" in names
    assert reader.point_cloud_topic() == odd
    assert reader.point_cloud_topic(odd) == odd
    times = reader.times(odd)
    assert len(times) == 10
    cloud = reader.read_point_cloud(odd, 3)
    assert np.array_equal(cloud.points, ndtcu.read_point_cloud(sample / "scans" / "000003.pcd").points)
    with pytest.raises(ndtcu.IoError, match=r"no topic '/p\\xFFoints' in the bag; its topics: .*/p\\xFFints"):
        reader.times(b"/p\xffoints")
    with pytest.raises(TypeError, match="^topic: expected str or bytes, got int"):
        reader.times(3)


def test_non_finite_times_and_poses_are_refused(sample, truth_poses):
    """Localizer.localize(scan, nan) was accepted (and predicted from); every time and pose
    argument now refuses a non-finite value with a ValueError naming it."""
    scan = ndtcu.read_point_cloud(sample / "scans" / "000000.pcd")
    loc = ndtcu.Localizer()
    loc.set_map(ndtcu.read_point_cloud(sample / "map.pcd"))
    loc.set_initial_pose(truth_poses[0])
    for t in (float("nan"), float("inf"), -float("inf")):
        with pytest.raises(ValueError, match=r"^time: expected a finite number, got (nan|inf|-inf)$"):
            loc.localize(scan, t)
        with pytest.raises(ValueError, match="^time: expected a finite number"):
            loc.predict(t)
        with pytest.raises(ValueError, match="^time: expected a finite number"):
            ndtcu.tum_line(t, np.eye(4))
    bad = truth_poses[0].copy()
    bad[1, 3] = np.nan
    with pytest.raises(ValueError, match=r"^pose: non-finite value nan at \[1, 3\]$"):
        loc.set_initial_pose(bad)
    with pytest.raises(ValueError, match=r"^around: non-finite value nan at \[1, 3\]$"):
        loc.set_initial_region(bad, 2.0)
    cov = np.eye(6) * 0.01
    with pytest.raises(ValueError, match=r"^prediction: non-finite value nan at \[1, 3\]$"):
        loc.localize(scan, 0.0, bad, cov)
    cov_bad = cov.copy()
    cov_bad[2, 2] = np.inf
    with pytest.raises(ValueError, match=r"^covariance: non-finite value inf at \[2, 2\]$"):
        loc.localize(scan, 0.0, truth_poses[0], cov_bad)
    # Nothing was taken: the localizer still tracks from its initial pose.
    f = loc.localize(scan, 0.0)
    assert f.valid and np.linalg.norm(f.pose[:3, 3] - truth_poses[0][:3, 3]) < 0.1

    aligner = ndtcu.Aligner(backend="cpu")
    aligner.set_target(ndtcu.read_point_cloud(sample / "map.pcd"))
    pose = ndtcu.matrix_to_pose(truth_poses[0])
    pose[5] = np.nan
    with pytest.raises(ValueError, match=r"^guess: non-finite value nan at \[0, 5\]$"):
        aligner.align(scan, pose)
    with pytest.raises(ValueError, match=r"^guess: non-finite value nan at \[1, 3\]$"):
        aligner.align(scan, bad)
    guesses = np.stack([truth_poses[0], bad])
    with pytest.raises(ValueError, match=r"^guesses: non-finite value nan at \[1, 1, 3\]$"):
        aligner.align_batch(scan, guesses)
    with pytest.raises(ValueError, match=r"^around: non-finite value nan at \[0, 5\]$"):
        ndtcu.find_initial_pose(aligner, scan, pose)
    with pytest.raises(ValueError, match=r"^transform: non-finite value nan at \[1, 3\]$"):
        aligner.evaluate(scan, bad)
    with pytest.raises(ValueError, match=r"^prior_pose: non-finite value nan at \[5\]$"):
        ndtcu.Aligner(backend="cpu", prior_pose=pose)
    info = np.zeros((6, 6))
    info[0, 0] = np.inf
    with pytest.raises(ValueError, match=r"^prior_information: non-finite value inf at \[0, 0\]$"):
        ndtcu.Aligner(backend="cpu", prior_information=info)


def test_voxel_leaf_too_small_for_the_crop_is_refused():
    """The library's limit, as the command line's --voxel: a leaf the filter could not use
    on any scan of the crop is refused when the Localizer is made, naming value and limit."""
    with pytest.raises(ndtcu.Error, match=r"voxel_leaf 1e-09 m is below the smallest leaf 0.0002 m for max_range 100 m"):
        ndtcu.Localizer(voxel_leaf=1e-9)
    with pytest.raises(ndtcu.Error, match=r"below the smallest leaf 0.002 m for max_range 1000 m"):
        ndtcu.Localizer(voxel_leaf=1e-3, max_range=1000.0)
    assert ndtcu.Localizer(voxel_leaf=2e-4).settings.voxel_leaf == 2e-4


def test_imu_samples():
    # Localizer.add_imu: sequences of three, out-of-order samples dropped and counted, a
    # non-finite value refused naming it; the settings' IMU fields as keywords.
    loc = ndtcu.Localizer(deskew="imu", imu_yaw_deg=90.0, backend="cpu")
    assert loc.settings.deskew == "imu" and loc.settings.imu_yaw_deg == 90.0 and loc.settings.imu_max_gap == 0.02
    loc.add_imu(0.0, [0.0, 0.0, 1.0])
    loc.add_imu(0.005, np.array([0.0, 0.0, 1.0]), (0.0, 0.0, 9.81))
    loc.add_imu(0.001, [0.0, 0.0, 1.0])
    stats = loc.imu_stats
    assert stats["added"] == 2 and stats["out_of_order"] == 1 and stats["held"] == 2
    assert loc.frame_times_disagree is False  # nothing localized yet
    assert ndtcu.Localizer(covariance_deskew_jerk=0.5).settings.covariance_deskew_jerk == 0.5
    assert ndtcu.Localizer().settings.deskew_forward is True
    assert ndtcu.Localizer(deskew_forward=False).settings.deskew_forward is False
    with pytest.raises(ndtcu.Error, match="angular_velocity.x is nan"):
        loc.add_imu(0.01, [float("nan"), 0.0, 0.0])
    with pytest.raises(ValueError, match="3 numbers each"):
        loc.add_imu(0.01, [0.0, 0.0])
