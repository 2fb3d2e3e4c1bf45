"""A fleet on the GPUs of this machine (skipped without a CUDA device): every GPU in use,
the device of each run in the report, each trajectory the one `ndtcu localize --backend
cuda` writes."""
import csv
import subprocess

import pytest
import yaml

import ndtcu

ray = pytest.importorskip("ray")

from ndtcu.fleet import load, run_fleet  # noqa: E402


def test_fleet_on_every_gpu(sample, cli, tmp_path):
    devices = ndtcu.cuda_devices()
    if not devices:
        pytest.skip("no CUDA device: " + ndtcu.cuda_unavailable_reason())
    ray.init(num_cpus=2 * len(devices), num_gpus=len(devices), include_dashboard=False, log_to_driver=False,
             logging_level="WARNING")
    try:
        ref = str(sample / "poses_tum.txt")
        m = tmp_path / "fleet.yaml"
        m.write_text(yaml.safe_dump({"runs": [
            {"name": "s", "map": str(sample / "map.pcd"), "scans": str(sample / "scans"), "reference": ref,
             "settings": {"init-from": ref}, "sweep": {"voxel": [0.5, 0.7, 1.0, 2.0][:2 * len(devices)]}}]},
            sort_keys=False))
        assert run_fleet(m, tmp_path / "out", progress=False) == 0
    finally:
        ray.shutdown()
    with open(tmp_path / "out" / "runs.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    names = {d["name"] for d in devices}
    for row in rows:
        assert row["status"] == "done" and row["device"].startswith("GPU ")
        assert any(n in row["device"] for n in names), row["device"]
    assert len({row["device"] for row in rows}) == min(len(devices), len(rows))
    for run in load(m).runs:
        out = tmp_path / "cli" / run.name
        subprocess.run([cli, *run.args, "--backend", "cuda", "--device", "0", "--threads", "1", "--out", str(out),
                        "--no-plot"], check=True, capture_output=True)
        assert (tmp_path / "out" / "runs" / run.name / "trajectory_tum.txt").read_bytes() == \
            (out / "trajectory_tum.txt").read_bytes(), run.name
