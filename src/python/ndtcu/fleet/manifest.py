"""The fleet manifest: a YAML file listing localization runs, checked whole before any run
starts, and expanded (parameter sweeps) into the command lines of `ndtcu localize`.

    defaults:                 # optional: fields every run starts from
      settings: {voxel: 1.0}
    runs:
      - name: campus          # optional (default: the scans' file or folder name)
        map: maps/campus.pcd  # a point cloud file or a tiled map folder
        scans: logs/day1.mcap # a folder of scans, a list file or a rosbag
        topic: /points        # with a bag (optional: its only PointCloud2 topic)
        reference: logs/day1_tum.txt   # optional: evaluated against (success, ATE)
        settings:             # any `ndtcu localize` option, by name (dashes or underscores)
          init-from: logs/day1_tum.txt
          config: autoware/ndt_scan_matcher.param.yaml
          max-range: 80
        sweep:                # optional: one run per combination of these values
          resolution: [1.0, 2.0]
          voxel: [0.5, 1.0]

Relative paths are relative to the manifest's folder. A value true gives a flag
(`accept-max-iterations: true`), false leaves it out, a list gives comma-separated values
(`init: [0, 0, 0, 0, 0, 0]`). Every error names the entry and the field.
"""
import hashlib
import itertools
import json
import os
import re

RUN_FIELDS = ("name", "map", "scans", "topic", "reference", "settings", "sweep")
TOP_FIELDS = ("defaults", "runs")
# Options ndtcu-fleet sets itself: where the outputs go, and the backend and device that
# follow from what Ray allots to the run.
FLEET_OPTIONS = {
    "out": "the fleet writes each run's outputs under --out DIR/runs/NAME",
    "no-plot": "the fleet draws its own report",
    "backend": "the fleet picks it: cuda on the GPU Ray allots to the run, cpu without one",
    "device": "the fleet picks it from the GPU Ray allots to the run",
    "map": "give it as the run's field 'map'",
    "scans": "give it as the run's field 'scans'",
    "topic": "give it as the run's field 'topic'",
    "reference": "give it as the run's field 'reference'",
}
# Options whose value is a file or folder: resolved against the manifest's folder and
# checked to exist before anything starts.
PATH_OPTIONS = ("init-from", "odometry", "config")
# A minimal command line that parses, to check one option at a time.
_PROBE = ["localize", "--map", "map", "--scans", "scans"]


class ManifestError(ValueError):
    """A manifest that cannot run: the message names the file, the entry and the field."""


class Run:
    """One run of the fleet: its name, the `ndtcu localize` arguments (without --out and
    the backend) and what identifies its result (`key`, a SHA-256 of the arguments, the
    inputs' sizes and modification times, and ndtcu's version)."""

    def __init__(self, name, entry, args, params, base):
        self.name = name
        self.entry = entry  # "runs[2]" (the manifest entry it came from)
        self.args = args
        # The files and folders it reads (every path argument, made absolute by load()).
        self.inputs = [a for a in args if os.path.isabs(a) and os.path.exists(a)]
        self.params = params  # {setting: value} of the sweep that made it ({} without one)
        self.base = base  # the entry's name before the sweep
        self.key = None  # run_key(), set by load()

    def to_dict(self):
        return {"name": self.name, "entry": self.entry, "base": self.base, "params": self.params,
                "args": self.args, "key": self.key}


def option_name(key):
    """The `ndtcu localize` option of a settings key (`max_range` and `max-range` alike)."""
    return str(key).strip().lstrip("-").replace("_", "-")


def _value_text(value):
    if isinstance(value, bool):
        raise TypeError("a flag takes true or false")
    if isinstance(value, float):
        return repr(value)
    return str(value)


def option_args(option, value):
    """The arguments of one setting: [] for false, [--opt] for true, [--opt, v] else."""
    if value is True:
        return ["--" + option]
    if value is False or value is None:
        return []
    if isinstance(value, (list, tuple)):
        return ["--" + option, ",".join(_value_text(v) for v in value)]
    if isinstance(value, dict):
        raise TypeError("expected a value, a list or true/false, got a mapping")
    return ["--" + option, _value_text(value)]


def _check_command(args):
    import ndtcu

    ndtcu.check_command(args)


def _cli_message(text):
    # CLI11's messages end with a newline and may say "Run with --help ..."; a range with
    # no upper bound is given up to the largest double, in all its 309 digits.
    text = " ".join(str(text).split()).replace(" Run with --help for more information.", "")
    return re.sub(r"Value (\S+) not in range (\S+) to \d{30,}(\.\d+)?",
                  lambda m: f"value {m.group(1)} is below {float(m.group(2)):g}", text)


def _identity(path):
    """What stands for a file's or folder's content in a run's key: the size and
    modification time of the file, or of every file under the folder (by relative path)."""
    if os.path.isdir(path):
        items = []
        for root, dirs, files in os.walk(path):
            dirs.sort()
            for f in sorted(files):
                p = os.path.join(root, f)
                try:
                    st = os.stat(p)
                except OSError:
                    continue
                items.append([os.path.relpath(p, path), st.st_size, st.st_mtime_ns])
        return {"folder": items}
    st = os.stat(path)
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns}


def run_key(run, version):
    """SHA-256 of what decides a run's result: its arguments, its inputs' identity and
    ndtcu's version. The same key means the outputs on disk are this run's."""
    h = hashlib.sha256()
    doc = {"ndtcu": version, "args": run.args,
           "inputs": {p: _identity(p) for p in sorted(set(run.inputs)) if os.path.exists(p)}}
    h.update(json.dumps(doc, sort_keys=True).encode())
    return h.hexdigest()


def _safe_name(text):
    return re.sub(r"[^A-Za-z0-9._=+-]+", "_", text).strip("._") or "run"


def _sweep_label(option, value):
    v = ",".join(_value_text(x) for x in value) if isinstance(value, (list, tuple)) else _value_text(value)
    return f"{option}={v}"


class Manifest:
    """A checked manifest: `runs` (Run objects, in the manifest's order, sweeps expanded)."""

    def __init__(self, path, runs):
        self.path = path
        self.runs = runs


def load(path):
    """Reads and checks the manifest at `path`; raises ManifestError naming the entry and
    field of the first problem (nothing has started then)."""
    import yaml

    try:
        with open(path, encoding="utf-8") as f:
            doc = yaml.safe_load(f)
    except OSError as e:
        raise ManifestError(f"{path}: cannot read the manifest: {e.strerror}") from None
    except yaml.YAMLError as e:
        raise ManifestError(f"{path}: not valid YAML: {' '.join(str(e).split())}") from None
    return parse(doc, path)


def parse(doc, path):
    where = path
    base_dir = os.path.dirname(os.path.abspath(path))

    def fail(entry, message):
        raise ManifestError(f"{where}: {entry}: {message}")

    if not isinstance(doc, dict):
        raise ManifestError(f"{where}: expected a mapping with 'runs' (a list of runs), got "
                            f"{type(doc).__name__}")
    for k in doc:
        if k not in TOP_FIELDS:
            raise ManifestError(f"{where}: unknown field '{k}' (the manifest has: {', '.join(TOP_FIELDS)})")
    defaults = doc.get("defaults") or {}
    if not isinstance(defaults, dict):
        fail("defaults", "expected a mapping of run fields")
    for k in defaults:
        if k not in RUN_FIELDS or k == "name":
            fail("defaults", f"unknown field '{k}' (defaults may hold: "
                             f"{', '.join(f for f in RUN_FIELDS if f != 'name')})")
    entries = doc.get("runs")
    if not isinstance(entries, list) or not entries:
        raise ManifestError(f"{where}: 'runs' must be a non-empty list of runs")

    def resolve(p):
        p = os.path.expanduser(str(p))
        return p if os.path.isabs(p) else os.path.normpath(os.path.join(base_dir, p))

    runs, names = [], {}
    for i, raw in enumerate(entries):
        entry = f"runs[{i}]"
        if not isinstance(raw, dict):
            fail(entry, f"expected a mapping of run fields, got {type(raw).__name__}")
        label = f"{entry} ({raw['name']})" if isinstance(raw.get("name"), str) else entry
        for k in raw:
            if k not in RUN_FIELDS:
                fail(label, f"unknown field '{k}' (a run has: {', '.join(RUN_FIELDS)})")
        fields = dict(defaults)
        fields.update({k: v for k, v in raw.items() if k != "settings"})
        settings = {}
        for source, what in ((defaults.get("settings"), "defaults.settings"), (raw.get("settings"), "settings")):
            if source is None:
                continue
            if not isinstance(source, dict):
                fail(label if what == "settings" else "defaults", f"{what}: expected a mapping of options")
            for k, v in source.items():
                settings[option_name(k)] = (v, what if what == "settings" else "defaults.settings")
        for field in ("map", "scans"):
            if fields.get(field) in (None, ""):
                fail(label, f"field '{field}' is missing")
        args = ["localize"]
        for field in ("map", "scans", "reference"):
            if fields.get(field) in (None, ""):
                continue
            p = resolve(fields[field])
            if not os.path.exists(p):
                fail(label, f"{field}: {p}: no such file or folder")
            args += ["--" + field, p]
        if fields.get("topic") not in (None, ""):
            args += ["--topic", str(fields["topic"])]

        def setting_args(option, value, field):
            if option in FLEET_OPTIONS:
                fail(label, f"{field}.{option}: not a setting here ({FLEET_OPTIONS[option]})")
            try:
                a = option_args(option, value)
            except TypeError as e:
                fail(label, f"{field}.{option}: {e}")
            if option in PATH_OPTIONS and len(a) == 2:
                p = resolve(a[1])
                if not os.path.exists(p):
                    fail(label, f"{field}.{option}: {p}: no such file or folder")
                if option == "config":
                    import ndtcu

                    try:
                        ndtcu.check_autoware_config(p)
                    except ndtcu.Error as e:
                        fail(label, f"{field}.{option}: {e}")
                a = [a[0], p]
            try:
                _check_command(_PROBE + a)
            except ValueError as e:
                msg = _cli_message(e)
                if "not expected" in msg:
                    fail(label, f"{field}.{option}: unknown option (not an option of `ndtcu localize`; "
                                f"`ndtcu localize --help` lists them)")
                fail(label, f"{field}.{option}: {msg}")
            return a

        base_args = list(args)
        for option, (value, field) in settings.items():
            base_args += setting_args(option, value, field)
        sweep = raw.get("sweep", defaults.get("sweep")) or {}
        if not isinstance(sweep, dict):
            fail(label, "sweep: expected a mapping of option: [values]")
        grid = []
        for k, values in sweep.items():
            option = option_name(k)
            if not isinstance(values, list) or not values:
                fail(label, f"sweep.{option}: expected a non-empty list of values")
            if option in settings:
                fail(label, f"sweep.{option}: also in settings (give it in one place)")
            grid.append((option, values))
        base = fields.get("name")
        if base is not None and (not isinstance(base, str) or not base.strip()):
            fail(label, "name: expected a non-empty text")
        if base is None:
            stem = os.path.basename(os.path.normpath(str(fields["scans"])))
            base = os.path.splitext(stem)[0] if os.path.isfile(resolve(fields["scans"])) else stem
        base = _safe_name(base)
        combos = list(itertools.product(*[[(o, v) for v in vs] for o, vs in grid])) if grid else [()]
        for combo in combos:
            run_args = list(base_args)
            params = {}
            for option, value in combo:
                run_args += setting_args(option, value, "sweep")
                params[option] = value
            # The whole command line together (options that exclude each other).
            try:
                _check_command(run_args)
            except ValueError as e:
                fail(label, f"settings: {_cli_message(e)}")
            name = base if not combo else _safe_name(base + "-" + "-".join(_sweep_label(o, v) for o, v in combo))
            if name in names:
                fail(label, f"name: the run '{name}' is also made by {names[name]} (names must differ: give "
                            f"'name')")
            names[name] = label
            runs.append(Run(name, entry, run_args, params, base))
    import ndtcu

    for run in runs:
        run.key = run_key(run, ndtcu.__version__)
    return Manifest(path, runs)
