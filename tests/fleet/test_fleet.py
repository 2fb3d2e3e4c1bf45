"""ndtcu.fleet on a local Ray cluster of 2 CPUs: a manifest of folders, a list, a bag and a
sweep over the sample data (and BALM from ../shared/data when present); each run's
trajectory equal to `ndtcu localize`'s byte for byte, the report's numbers equal to the
summaries; a worker killed mid-run retried, a fleet stopped by SIGINT or SIGTERM resumed,
a run that always fails reported with its reason; what stops a fleet before it starts
(an output folder it cannot write or another fleet's, runs no node can hold) in one line."""
import csv
import json
import os
import signal
import subprocess
import sys
import time

import pytest
import yaml

from conftest import cli_localize

ray = pytest.importorskip("ray")

from ndtcu.fleet import load, run_fleet  # noqa: E402
from ndtcu.fleet.runner import FAULT_ENV, OUTPUTS, Interrupted, Signals  # noqa: E402


@pytest.fixture(scope="module")
def cluster():
    # No GPU offered, so the runs take the CPU backend on any machine (test_gpus.py: GPUs).
    ray.init(num_cpus=2, num_gpus=0, include_dashboard=False, log_to_driver=False, logging_level="WARNING")
    yield ray.get_runtime_context().gcs_address
    ray.shutdown()


def write_manifest(path, runs, defaults=None):
    doc = {"runs": runs}
    if defaults:
        doc["defaults"] = defaults
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def sample_runs(sample, bags, data_dir, tmp_path):
    ref = str(sample / "poses_tum.txt")
    listing = tmp_path / "every_other.txt"  # a scan list: the even scans with their times
    times = [line.split()[0] for line in open(ref) if line.strip() and not line.startswith("#")]
    listing.write_text("".join(f"{sample / 'scans' / f'{i:06d}.pcd'} {times[i]}\n" for i in range(0, 10, 2)))
    runs = [
        {"name": "folder", "map": str(sample / "map.pcd"), "scans": str(sample / "scans"), "reference": ref,
         "settings": {"init-from": ref}},
        {"name": "list", "map": str(sample / "map.pcd"), "scans": str(listing), "reference": ref,
         "settings": {"init-from": ref, "max-range": 60}},
        {"name": "sweep", "map": str(sample / "map.pcd"), "scans": str(sample / "scans"), "reference": ref,
         "settings": {"init-from": ref}, "sweep": {"voxel": [0.5, 2.0], "max_iterations": [5, 30]}},
    ]
    if bags:
        runs.append({"name": "bag", "map": str(sample / "map.pcd"), "scans": str(bags / "sample_mcap_zstd"),
                     "reference": ref, "settings": {"init-from": ref}})
    if data_dir:
        balm = data_dir / "balm_os0"
        runs.append({"name": "balm_odd", "map": str(balm / "map_even_frames_0-58_voxel0.1.pcd"),
                     "scans": str(balm / "odd_scans_1hz.txt"), "reference": str(balm / "poses_tum.txt"),
                     "settings": {"init-from": str(balm / "poses_tum.txt")}})
    return runs


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def number(text):
    return None if text == "" else float(text)


def test_fleet_equals_the_cli_and_resumes(cluster, sample, bags, data_dir, cli, tmp_path):
    m = write_manifest(tmp_path / "fleet.yaml", sample_runs(sample, bags, data_dir, tmp_path))
    out = tmp_path / "out"
    runs = load(m).runs
    assert len(runs) >= 6
    t0 = time.monotonic()
    assert run_fleet(m, out, max_retries=1, progress=False) == 0
    first_s = time.monotonic() - t0
    fleet = json.loads((out / "fleet.json").read_text())
    assert fleet["counts"] == {"runs": len(runs), "done": len(runs), "present": 0, "failed": 0, "not_run": 0,
                               "accepted_wrong": 0}
    table = read_csv(out / "runs.csv")
    assert [r["name"] for r in table] == [r.name for r in runs]
    for run, row in zip(runs, table):
        folder = out / "runs" / run.name
        assert sorted(os.listdir(folder)) == sorted([*OUTPUTS, "log.txt", "run.json"])
        # The CLI, run by hand with the same arguments, writes the same trajectories.
        mine = cli_localize(cli, run.args, tmp_path / "cli" / run.name)
        for name in ("trajectory_tum.txt", "trajectory_kitti.txt"):
            assert (folder / name).read_bytes() == (mine / name).read_bytes(), (run.name, name)
        s = json.loads((folder / "summary.json").read_text())
        assert s["status"] == "complete" and s["backend"] == "cpu"
        assert row["status"] == "done" and row["attempts"] == "1" and row["device"].startswith("CPU")
        for col, value in (("frames", s["frames"]), ("localized", s["localized"]), ("degenerate", s["degenerate"]),
                           ("lost", s["lost"]), ("fps", s["fps"]), ("success_rate", s["success"]["rate"]),
                           ("ate_rmse_m", s["ate"]["rmse_m"]), ("accepted_wrong", s["success"]["accepted_wrong"])):
            assert number(row[col]) == value, (run.name, col)
        assert json.loads((folder / "run.json").read_text())["key"] == run.key
    html = (out / "report.html").read_text()
    assert html.count("<svg") >= 3 and "against voxel" in html and "<script" not in html
    assert "http://" not in html.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "https://" not in html

    # The same manifest again: every run is present, nothing runs.
    t0 = time.monotonic()
    assert run_fleet(m, out, progress=False) == 0
    assert time.monotonic() - t0 < first_s / 2
    again = json.loads((out / "fleet.json").read_text())
    assert again["counts"]["present"] == len(runs) and again["counts"]["done"] == 0
    assert [r["status"] for r in read_csv(out / "runs.csv")] == ["present"] * len(runs)

    # A changed setting changes that run's key: it runs again, the others stay.
    doc = yaml.safe_load(m.read_text())
    doc["runs"][1]["settings"]["max-range"] = 70
    m.write_text(yaml.safe_dump(doc, sort_keys=False))
    assert run_fleet(m, out, progress=False) == 0
    statuses = {r["name"]: r["status"] for r in read_csv(out / "runs.csv")}
    assert statuses.pop("list") == "done" and set(statuses.values()) == {"present"}


def sweep_manifest(sample, tmp_path, values=(0.5, 0.7, 1.0, 1.5, 2.0, 3.0)):
    ref = str(sample / "poses_tum.txt")
    return write_manifest(tmp_path / "sweep.yaml", [
        {"name": "s", "map": str(sample / "map.pcd"), "scans": str(sample / "scans"), "reference": ref,
         "settings": {"init-from": ref}, "sweep": {"voxel": list(values)}}])


def test_a_killed_worker_is_retried(cluster, sample, tmp_path, monkeypatch):
    m = sweep_manifest(sample, tmp_path, (0.5, 1.0, 2.0))
    out = tmp_path / "out"
    monkeypatch.setenv(FAULT_ENV, "kill:s-voxel=1.0:1")
    assert run_fleet(m, out, max_retries=2, progress=False) == 0
    table = {r["name"]: r for r in read_csv(out / "runs.csv")}
    assert table["s-voxel=1.0"]["attempts"] == "2" and table["s-voxel=1.0"]["status"] == "done"
    assert table["s-voxel=0.5"]["attempts"] == "1" and table["s-voxel=2.0"]["attempts"] == "1"
    # Every run once, nothing half-written left.
    assert sorted(os.listdir(out / "runs")) == sorted(table)


def test_a_run_that_always_fails_is_reported(cluster, sample, tmp_path, monkeypatch):
    broken = tmp_path / "broken.pcd"
    broken.write_bytes(b"# .PCD v0.7\nVERSION 0.7\nFIELDS x y z\nSIZE 4 4 4\nTYPE F F F\nCOUNT 1 1 1\n"
                       b"WIDTH 100\nHEIGHT 1\nPOINTS 100\nDATA binary\n" + b"\0" * 12)
    ref = str(sample / "poses_tum.txt")
    m = write_manifest(tmp_path / "f.yaml", [
        {"name": "good", "map": str(sample / "map.pcd"), "scans": str(sample / "scans"), "settings": {"init-from": ref}},
        {"name": "broken_map", "map": str(broken), "scans": str(sample / "scans"), "settings": {"init-from": ref}},
        {"name": "crashes", "map": str(sample / "map.pcd"), "scans": str(sample / "scans"),
         "settings": {"init-from": ref, "voxel": 0.5}}])
    monkeypatch.setenv(FAULT_ENV, "kill:crashes:99")
    out = tmp_path / "out"
    assert run_fleet(m, out, max_retries=1, progress=False) == 1
    table = {r["name"]: r for r in read_csv(out / "runs.csv")}
    assert table["good"]["status"] == "done"
    assert table["broken_map"]["status"] == "failed" and table["broken_map"]["attempts"] == "1"
    assert "broken.pcd" in table["broken_map"]["reason"]
    assert table["crashes"]["status"] == "failed" and table["crashes"]["attempts"] == "2"
    assert "died" in table["crashes"]["reason"]
    assert sorted(os.listdir(out / "runs")) == ["good"]
    assert "broken.pcd" in (out / "failed" / "broken_map.log").read_text()
    html = (out / "report.html").read_text()
    assert 'class="failed"' in html and "broken.pcd" in html


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_then_resume(cluster, sample, tmp_path, signum):
    m = sweep_manifest(sample, tmp_path)
    out = tmp_path / "out"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    driver = subprocess.Popen([sys.executable, "-m", "ndtcu.fleet", "run", str(m), "--out", str(out),
                               "--address", cluster, "--max-retries", "0"], env=env, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and driver.poll() is None:
        runs = out / "runs"
        if runs.is_dir() and any(not n.startswith(".") for n in os.listdir(runs)):
            break
        time.sleep(0.05)
    driver.send_signal(signum)
    _, err = driver.communicate(timeout=60)
    # SIGTERM as SIGINT: the finished runs kept, the report written, 128 + the signal.
    assert driver.returncode == 128 + signum, err
    assert f"interrupted ({signal.Signals(signum).name})" in err and "Traceback" not in err
    assert not (out / ".ndtcu-fleet.lock").exists()
    fleet = json.loads((out / "fleet.json").read_text())
    finished = fleet["counts"]["done"]
    assert fleet["interrupted"] and 1 <= finished < 6 and fleet["counts"]["not_run"] == 6 - finished
    kept = {n: (out / "runs" / n / "run.json").read_bytes() for n in os.listdir(out / "runs") if not n.startswith(".")}
    assert len(kept) == finished
    # Started again: only the missing runs run; the finished ones are left as they were.
    assert run_fleet(m, out, progress=False) == 0
    again = json.loads((out / "fleet.json").read_text())
    assert again["counts"]["present"] == finished and again["counts"]["done"] == 6 - finished
    for n, data in kept.items():
        assert (out / "runs" / n / "run.json").read_bytes() == data
    assert sorted(n for n in os.listdir(out / "runs")) == sorted(r["name"] for r in again["runs"])


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_while_a_run_is_written_waits_for_it(signum):
    # A signal between a run's folder and its record would count a kept run as not run.
    written = []
    before = signal.getsignal(signum)
    with Signals() as signals:
        with pytest.raises(Interrupted) as stopped:
            with signals.deferred():
                os.kill(os.getpid(), signum)
                written.append("folder")
                time.sleep(0.05)
                written.append("record")
        assert stopped.value.signum == signum and signals.caught == signum
        assert written == ["folder", "record"]
        # Armed again: the next signal stops at once.
        with pytest.raises(Interrupted):
            os.kill(os.getpid(), signum)
            time.sleep(1)
    assert signal.getsignal(signum) == before


def test_progress_line_and_usage_errors(cluster, sample, tmp_path):
    m = sweep_manifest(sample, tmp_path, (1.0,))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    r = subprocess.run([sys.executable, "-m", "ndtcu.fleet", "run", str(m), "--out", str(tmp_path / "o"),
                        "--address", cluster], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "fleet [" in r.stderr and "1/1 runs" in r.stderr and "frames/s" in r.stderr and "ETA" in r.stderr
    # The fleet's lock is gone with it: two fleets of one manifest leave the same files.
    assert sorted(os.listdir(tmp_path / "o")) == ["fleet.json", "report.html", "runs", "runs.csv"]
    bad = write_manifest(tmp_path / "bad.yaml", [{"map": str(sample / "map.pcd"), "scans": str(sample / "scans"),
                                                  "settings": {"vox": 1}}])
    r = subprocess.run([sys.executable, "-m", "ndtcu.fleet", "run", str(bad), "--out", str(tmp_path / "b")],
                       env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "runs[0]: settings.vox: unknown option" in r.stderr
    assert not (tmp_path / "b").exists()


def run_main(args, capsys):
    """`ndtcu-fleet ARGS` in this process: (exit code, stderr)."""
    from ndtcu.fleet.__main__ import main

    code = main([str(a) for a in args])
    return code, capsys.readouterr().err


def one_line_error(err):
    lines = [line for line in err.splitlines() if "WARNING" not in line]  # Ray's own warnings aside
    assert len(lines) == 1 and lines[0].startswith("ndtcu-fleet: error: "), err
    return lines[0]


def test_an_output_folder_that_cannot_be_written(sample, tmp_path, capsys):
    m = sweep_manifest(sample, tmp_path, (1.0,))
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    code, err = run_main(["run", m, "--out", a_file], capsys)
    assert code == 2 and f"{a_file}: not a folder" in one_line_error(err)
    code, err = run_main(["run", m, "--out", a_file / "out"], capsys)
    assert code == 2 and f"{a_file / 'out'}: cannot make the output folder: Not a directory" in one_line_error(err)
    if os.geteuid() != 0:  # root writes into a read-only folder
        read_only = tmp_path / "read_only"
        read_only.mkdir(mode=0o555)
        code, err = run_main(["run", m, "--out", read_only], capsys)
        assert code == 2 and f"{read_only}: cannot write the output folder: Permission denied" in one_line_error(err)


def test_one_fleet_at_a_time_in_a_folder(sample, tmp_path, capsys):
    from ndtcu.fleet.runner import LOCK_NAME, OutFolder

    m = sweep_manifest(sample, tmp_path, (1.0,))
    out = tmp_path / "out"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time\nfrom ndtcu.fleet.runner import OutFolder\n"
                               "with OutFolder(sys.argv[1]):\n    print('held', flush=True)\n    time.sleep(120)\n",
                               str(out)], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        others = out / "runs" / ".tmp-s-voxel=1.0-0123abcd"  # the other fleet's run being written
        others.mkdir()
        code, err = run_main(["run", m, "--out", out], capsys)
        assert code == 2
        assert f"{out}: another fleet (pid {holder.pid} on " in one_line_error(err)
        assert others.is_dir() and not (out / "fleet.json").exists()
    finally:
        holder.kill()
        holder.wait()
    # Killed, it left its lock file, unlocked: the next fleet takes it, clears what was
    # half-written, and removes the file at its end.
    assert (out / LOCK_NAME).exists()
    with OutFolder(out):
        assert not others.exists()
        assert (out / LOCK_NAME).read_text().split()[0] == str(os.getpid())
    assert not (out / LOCK_NAME).exists()


def test_runs_no_node_can_hold(cluster, sample, tmp_path):
    # 4 CPUs per run on a cluster of 2: refused at once (Ray would keep the runs waiting).
    m = sweep_manifest(sample, tmp_path, (1.0,))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    r = subprocess.run([sys.executable, "-m", "ndtcu.fleet", "run", str(m), "--out", str(tmp_path / "o"),
                        "--address", cluster, "--cpus-per-run", "4"], env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2
    assert "--cpus-per-run 4: no node of the cluster has 4 CPUs (the most on one node is 2; 1 node, 2 CPUs" \
        in one_line_error(r.stderr)
    from ndtcu.fleet.runner import placement_problem

    nodes = [{"CPU": 8, "GPU": 1}, {"CPU": 2, "GPU": 0}]
    assert placement_problem(nodes, 4, 1) is None and placement_problem(nodes, 2, 0.5) is None
    assert placement_problem(nodes, 16, 0).startswith("--cpus-per-run 16: no node of the cluster has 16 CPUs")
    assert placement_problem(nodes, 1, 2).startswith("--gpus-per-run 2: no node of the cluster has 2 GPUs")
    assert placement_problem([{"CPU": 8}, {"CPU": 1, "GPU": 1}], 4, 1).startswith(
        "--cpus-per-run 4 with --gpus-per-run 1: no node of the cluster has both")
    assert placement_problem([{"CPU": 2}], 1, 1) is None  # no GPU anywhere: every run on the CPU
