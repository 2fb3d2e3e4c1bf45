#!/usr/bin/env python3
"""scripts/localize_bag.py and `ndtcu localize` on the same bag, checked with evo (PyPI), an
ATE implementation independent of ndtcu:
  - the script's trajectory_tum.txt equals the CLI's, byte for byte;
  - `evo_ape tum REFERENCE TRAJECTORY` (translation, no alignment, matched by time) gives the
    RMSE, mean and max that the CLI's summary.json reports as its ATE, to 1e-6 m (the TUM
    file holds positions to 6 decimals, so each position evo reads is within
    sqrt(3) x 0.5e-6 = 0.87e-6 m of the one ndtcu measured).

    bag_evo_check.py PACKAGE_DIR CLI SAMPLE_DIR BAG_DIR WORK

Exits 77 (skipped) without evo or matplotlib in this interpreter, or without the bags.
"""
import json
import os
import pathlib
import shutil
import subprocess
import sys
import zipfile

package_dir, cli, sample, bags, work = sys.argv[1:6]
sample, bags, work = pathlib.Path(sample), pathlib.Path(bags), pathlib.Path(work)
try:
    import matplotlib  # noqa: F401
    import evo  # noqa: F401
except ImportError as e:
    print(f"skipped: {e} (scripts/setup.sh installs evo and matplotlib)", file=sys.stderr)
    sys.exit(77)
if not (bags / "manifest.json").exists():
    print(f"skipped: no bags in {bags}", file=sys.stderr)
    sys.exit(77)
evo_ape = pathlib.Path(sys.executable).parent / "evo_ape"
root = pathlib.Path(__file__).resolve().parents[2]
shutil.rmtree(work, ignore_errors=True)
work.mkdir(parents=True)
env = dict(os.environ, PYTHONPATH=package_dir, HOME=str(work))  # evo keeps its settings in $HOME/.evo
reference = sample / "poses_tum.txt"
failures = []

for bag in ("sample_mcap_zstd", "sample_ros1_bz2.bag", "sample_sqlite3"):
    common = ["--init-from", str(reference), "--backend", "cpu", "--threads", "2"]
    cli_out, py_out = work / f"{bag}.cli", work / f"{bag}.py"
    subprocess.run([cli, "localize", "--map", str(sample / "map.pcd"), "--scans", str(bags / bag), "--reference",
                    str(reference), "--no-plot", "--out", str(cli_out), *common], check=True, capture_output=True)
    subprocess.run([sys.executable, str(root / "scripts" / "localize_bag.py"), str(sample / "map.pcd"), str(bags / bag),
                    "--out", str(py_out), "--reference", str(reference), *common], check=True, env=env)
    if not (py_out / "trajectory.png").stat().st_size > 0:
        failures.append(f"{bag}: no plot")
    est = py_out / "trajectory_tum.txt"
    if est.read_bytes() != (cli_out / "trajectory_tum.txt").read_bytes():
        failures.append(f"{bag}: the script's trajectory differs from ndtcu localize's")
    ate = json.loads((cli_out / "summary.json").read_text())["ate"]
    if ate["pairs"] != 10:
        failures.append(f"{bag}: {ate['pairs']} ATE pairs, expected 10")
    results = work / f"{bag}.evo.zip"
    subprocess.run([str(evo_ape), "tum", str(reference), str(est), "--save_results", str(results), "--no_warnings"],
                   check=True, capture_output=True, env=env)
    with zipfile.ZipFile(results) as z:
        stats = json.loads(z.read("stats.json"))
    for ours, theirs in (("rmse_m", "rmse"), ("mean_m", "mean"), ("max_m", "max")):
        diff = abs(ate[ours] - stats[theirs])
        print(f"{bag}: ATE {ours} ndtcu {ate[ours]:.9f} evo {stats[theirs]:.9f} (|diff| {diff:.1e} m)")
        if not diff <= 1e-6:
            failures.append(f"{bag}: ATE {ours} {ate[ours]} vs evo's {theirs} {stats[theirs]}")

for f in failures:
    print("FAILED:", f, file=sys.stderr)
sys.exit(1 if failures else 0)
