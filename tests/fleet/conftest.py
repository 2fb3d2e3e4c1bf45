"""Inputs of the fleet tests: the sample data, its bags (written by the rosbag fixture),
../shared/data when present, and the command-line tool to compare with."""
import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "data" / "sample"


@pytest.fixture(scope="session")
def sample():
    return SAMPLE


@pytest.fixture(scope="session")
def data_dir():
    """../shared/data (NDTCU_DATA_DIR), or None when absent."""
    d = pathlib.Path(os.environ.get("NDTCU_DATA_DIR") or ROOT.parent / "shared" / "data")
    return d if (d / "balm_os0").is_dir() else None


@pytest.fixture(scope="session")
def bags():
    """The sample bags (tests/rosbag's fixture), or None when they were not written."""
    d = os.environ.get("NDTCU_BAG_DIR", "")
    return pathlib.Path(d) if d and (pathlib.Path(d) / "manifest.json").exists() else None


@pytest.fixture(scope="session")
def cli():
    path = os.environ.get("NDTCU_CLI", "")
    if not path or not os.access(path, os.X_OK):
        pytest.skip("NDTCU_CLI (the ndtcu command-line tool) not given")
    return path


def cli_localize(cli, args, out, threads=1):
    """`ndtcu localize` as the fleet runs a run on the CPU: its arguments, the CPU backend,
    --threads, --out and --no-plot."""
    subprocess.run([cli, *args, "--backend", "cpu", "--threads", str(threads), "--out", str(out), "--no-plot"],
                   check=True, capture_output=True)
    return out
