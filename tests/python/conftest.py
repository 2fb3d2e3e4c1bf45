"""Shared inputs of the Python module's tests: the sample map and scans of data/sample."""
import os
import pathlib

import numpy as np
import pytest

import ndtcu

ROOT = pathlib.Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "data" / "sample"


@pytest.fixture(scope="session")
def sample():
    return SAMPLE


@pytest.fixture(scope="session")
def cli():
    path = os.environ.get("NDTCU_CLI", "")
    if not path or not os.access(path, os.X_OK):
        pytest.skip("NDTCU_CLI (the ndtcu command-line tool) not given")
    return path


@pytest.fixture(scope="session")
def truth_poses():
    """The sample scans' true poses (KITTI lines) as 4x4 matrices."""
    rows = np.loadtxt(SAMPLE / "poses_kitti.txt")
    out = []
    for r in rows:
        t = np.eye(4)
        t[:3] = r.reshape(3, 4)
        out.append(t)
    return out


@pytest.fixture(params=["cpu", "cuda"])
def backend(request):
    """Each backend in turn; 'cuda' is skipped where no CUDA device is usable."""
    if request.param == "cuda" and not ndtcu.cuda_devices():
        pytest.skip("no CUDA device: " + ndtcu.cuda_unavailable_reason())
    return request.param
