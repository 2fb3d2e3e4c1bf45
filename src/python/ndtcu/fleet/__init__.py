"""ndtcu.fleet: localization over fleets of logs on Ray (`ndtcu-fleet`, `python -m ndtcu.fleet`).

A manifest (ndtcu.fleet.manifest) lists runs: a map, scans, a reference and `ndtcu localize`
settings, with parameter sweeps. run_fleet() runs each as one Ray task, on a GPU where Ray
allots one, retries a run whose worker died, writes each run's outputs whole, skips runs
already done for the same inputs and settings, and writes the fleet's report. See
docs/fleet.md.
"""
from .manifest import Manifest, ManifestError, Run, load  # noqa: F401
from .runner import execute, run_fleet  # noqa: F401
