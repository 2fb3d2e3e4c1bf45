"""The fleet manifest: a YAML file listing localization runs, checked whole before any run
starts, and expanded (parameter sweeps) into the command lines of `ndtcu localize`.

    defaults:                 # optional: fields every run starts from
      settings: {voxel: 1.0}
    runs:
      - name: campus          # optional (default: the scans' file or folder name); it names
                              # the run's folder (name_problem: letters, digits, . _ = + -)
        map: maps/campus.pcd  # a point cloud file or a tiled map folder
        scans: logs/day1.mcap # a folder of scans, a list file or a rosbag
        topic: /points        # with a bag only (optional: its only PointCloud2 topic)
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

A key given twice in one mapping is an error naming both lines, as in the Autoware
`--config` reader (apps/autoware_params.cpp). The document is measured while it is
composed, each alias counting the nodes it repeats: nested aliases are refused at the size
they would expand to (MAX_NODES) before anything is built of them. A fleet holds at most
MAX_RUNS runs, counted before any sweep is expanded.
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

# The most runs a manifest may make, sweeps expanded. Counted before anything is expanded:
# a few sweeps of a hundred values each multiply to 10^8 runs, more than the driver can
# hold (and more than a fleet could run), in a manifest of 2 KB.
MAX_RUNS = 100_000
# The most YAML nodes a manifest may hold with its aliases expanded (each alias counts the
# nodes it repeats). A run written out takes about 15 nodes, so this holds tens of
# thousands of runs written one by one; nine levels of nine aliases (a file of 600 bytes)
# expand to 9^9 and are refused while the file is read, before anything is built of it.
MAX_NODES = 1_000_000
# The longest run name: a run's folder is DIR/runs/NAME and, while it is written,
# DIR/runs/.tmp-NAME-XXXXXXXX (14 characters more); a file name may hold 255 bytes on the
# usual file systems (NAME_MAX), which leaves 241: 200 keeps a margin.
MAX_NAME_LENGTH = 200
# What a run's name may hold: it names a folder, so no path separator, and nothing a shell
# or a URL (the report links the folders) would need quoted; no '.' or '_' at either end
# ('.' and '..' are no folders of their own, the fleet's temporary folders begin with '.').
# These are the names _safe_name leaves as they are: a name given is its folder's name.
NAME_PATTERN = re.compile(r"[A-Za-z0-9=+-]([A-Za-z0-9._=+-]*[A-Za-z0-9=+-])?")
# What `ndtcu localize --scans` reads as a rosbag (rosbag::is_bag_path in
# src/rosbag/bag_reader.cpp): a file of these extensions, or a folder holding a
# metadata.yaml. Anything else is a folder of scans or a list, which has no topics.
BAG_EXTENSIONS = (".bag", ".mcap", ".db3")


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


def run_key(run, version, identities=None):
    """SHA-256 of what decides a run's result: its arguments, its inputs' identity and
    ndtcu's version. The same key means the outputs on disk are this run's. `identities`
    (a dict, path -> its identity's JSON) keeps each input's identity for the next run that
    reads it: the runs of a sweep share their inputs, and a folder of scans is walked once."""
    if identities is None:
        identities = {}
    # The bytes of json.dumps({"ndtcu": version, "args": run.args, "inputs": {path:
    # _identity(path)}}, sort_keys=True), the key's definition, hashed as they are made.
    h = hashlib.sha256()
    h.update(b'{"args": ' + json.dumps(run.args).encode() + b', "inputs": {')
    for i, p in enumerate(p for p in sorted(set(run.inputs)) if os.path.exists(p)):
        if p not in identities:
            identities[p] = json.dumps(_identity(p), sort_keys=True).encode()
        h.update((b", " if i else b"") + json.dumps(p).encode() + b": " + identities[p])
    h.update(b'}, "ndtcu": ' + json.dumps(version).encode() + b"}")
    return h.hexdigest()


def _safe_name(text):
    """A run's name made of `text` (a scans file's name, a sweep's values): what NAME_PATTERN
    refuses becomes '_', and '.' and '_' are trimmed from both ends."""
    return re.sub(r"[^A-Za-z0-9._=+-]+", "_", text).strip("._") or "run"


def _shown(name, limit=60):
    return f"'{name}'" if len(name) <= limit else f"'{name[:limit]}...'"


def name_problem(name):
    """Why `name` cannot be a run's name (it names the run's folder), or None."""
    if len(name) > MAX_NAME_LENGTH:
        return (f"{_shown(name)} is {len(name)} characters long; a run's name may hold at most {MAX_NAME_LENGTH} "
                f"(it names the run's folder, and the fleet adds up to 14 characters to it while the folder is "
                f"written: a file name may hold 255 bytes)")
    if "/" in name or "\\" in name:
        return f"{_shown(name)} holds a path separator; a run's name names one folder (DIR/runs/NAME), not a path"
    if name in (".", "..") or name[:1] in "._" or name[-1:] in "._":
        return (f"{_shown(name)} begins or ends with '.' or '_'; a run's name may not ('.' and '..' are no folder of "
                f"their own, and the fleet's temporary folders begin with '.')")
    if not NAME_PATTERN.fullmatch(name):
        bad = "".join(sorted(set(re.sub(r"[A-Za-z0-9._=+-]", "", name))))
        return (f"{_shown(name)} holds {bad!r}; a run's name may hold only ASCII letters, digits and . _ = + - (it "
                f"names the run's folder)")
    return None


def is_bag(path):
    """True when `ndtcu localize --scans PATH` reads PATH as a rosbag (BAG_EXTENSIONS)."""
    if os.path.isdir(path):
        return os.path.exists(os.path.join(path, "metadata.yaml"))
    return os.path.splitext(path)[1].lower() in BAG_EXTENSIONS


def _run_count(entries, defaults):
    """[(runs, sweep options)] of each entry, counted before any sweep is expanded (an entry
    that is not a mapping, or a sweep that is not one of lists, counts as one run here: it
    is refused while the entry is read)."""
    counts = []
    for raw in entries:
        sweep = raw.get("sweep", defaults.get("sweep")) if isinstance(raw, dict) else None
        n, options = 1, 0
        if isinstance(sweep, dict):
            for values in sweep.values():
                if isinstance(values, list) and values:
                    n *= len(values)
                    options += 1
        counts.append((n, options))
    return counts


def _sweep_label(option, value):
    if isinstance(value, bool):  # a flag swept: given, or not
        return f"{option}={'true' if value else 'false'}"
    v = ",".join(_value_text(x) for x in value) if isinstance(value, (list, tuple)) else _value_text(value)
    return f"{option}={v}"


class Manifest:
    """A checked manifest: `runs` (Run objects, in the manifest's order, sweeps expanded)."""

    def __init__(self, path, runs):
        self.path = path
        self.runs = runs


_loader = {}


def _manifest_loader():
    """yaml.SafeLoader that refuses a key given twice in one mapping and a document that
    its aliases expand past MAX_NODES, both while composing (before any value is built)."""
    if _loader:
        return _loader["class"]
    import yaml

    class ManifestLoader(yaml.SafeLoader):
        def __init__(self, stream, path):
            super().__init__(stream)
            self.path = path
            self.where = []  # the path of the node being composed: "runs", "[0]", "scans", ...
            self.keys = {}  # id(mapping node) -> {(tag, key): line} of the keys composed so far
            self.sizes = {}  # id(node) -> nodes it holds, itself included, aliases expanded
            self.children = []  # per node under way: the nodes its children hold so far
            self.expanded = 0  # nodes of the document so far, aliases expanded

        def key_path(self, key=None):
            parts = [p for p in self.where if p is not None] + ([str(key)] if key is not None else [])
            return "".join(p if p.startswith("[") or i == 0 else "." + p for i, p in enumerate(parts)) or "the top"

        def grow(self, n, mark, alias=None):
            self.expanded += n
            if self.expanded > MAX_NODES:
                how = (f" with its aliases expanded (the alias *{alias} at {self.key_path()} repeats {n:,} "
                       f"nodes; aliases of aliases multiply)" if alias else "")
                raise ManifestError(f"{self.path}: line {mark.line + 1}: the manifest holds more than "
                                    f"{MAX_NODES:,} YAML nodes{how}; a manifest may hold at most {MAX_NODES:,}")

        def compose_node(self, parent, index):
            if isinstance(index, int):
                self.where.append(f"[{index}]")
            elif isinstance(index, yaml.ScalarNode):
                self.where.append(str(index.value))
            else:
                self.where.append(None)  # the document, or a mapping's key
            try:
                event = self.peek_event()
                if isinstance(event, yaml.AliasEvent):
                    node = super().compose_node(parent, index)
                    size = self.sizes.get(id(node))
                    if size is None:  # its anchor's node is still being composed
                        raise ManifestError(f"{self.path}: line {event.start_mark.line + 1}: {self.key_path()}: "
                                            f"the alias *{event.anchor} names a node that holds it (a loop)")
                    self.grow(size, event.start_mark, event.anchor)
                else:
                    self.grow(1, event.start_mark)
                    self.children.append(0)
                    try:
                        node = super().compose_node(parent, index)
                    finally:
                        size = 1 + self.children.pop()
                    self.sizes[id(node)] = size
                if self.children:
                    self.children[-1] += size
                if index is None and isinstance(parent, yaml.MappingNode) and isinstance(node, yaml.ScalarNode) \
                        and node.tag != "tag:yaml.org,2002:merge":
                    # A key its mapping has already. (`<<`, a merge, is no key of its own: the
                    # keys it brings in are those the mapping does not write.)
                    seen = self.keys.setdefault(id(parent), {})
                    key, line = (node.tag, node.value), event.start_mark.line + 1
                    if key in seen:
                        lines = f"line {line}" if seen[key] == line else f"lines {seen[key]} and {line}"
                        raise ManifestError(f"{self.path}: {lines}: {self.key_path(node.value)}: "
                                            f"the key is given twice in one mapping (a YAML reader keeps one of the "
                                            f"values without a word); give it once")
                    seen[key] = line
                return node
            finally:
                self.where.pop()

    _loader["class"] = ManifestLoader
    return ManifestLoader


def read_yaml(path):
    """The manifest's YAML document at `path` (ManifestError when it cannot be read, is not
    valid YAML, gives a key twice in one mapping or expands past MAX_NODES)."""
    import yaml

    try:
        with open(path, encoding="utf-8") as f:
            loader = _manifest_loader()(f, str(path))
            try:
                return loader.get_single_data()
            finally:
                loader.dispose()
    except OSError as e:
        raise ManifestError(f"{path}: cannot read the manifest: {e.strerror}") from None
    except yaml.YAMLError as e:
        raise ManifestError(f"{path}: not valid YAML: {' '.join(str(e).split())}") from None


def load(path):
    """Reads and checks the manifest at `path`; raises ManifestError naming the entry and
    field of the first problem (nothing has started then)."""
    return parse(read_yaml(path), path)


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
    counts = _run_count(entries, defaults)
    total = sum(n for n, _ in counts)
    if total > MAX_RUNS:
        i = max(range(len(counts)), key=lambda i: counts[i][0])
        n, options = counts[i]
        raise ManifestError(f"{where}: the manifest makes {total:,} runs ({n:,} by the sweep of runs[{i}] over "
                            f"{options} option{'' if options == 1 else 's'}); a fleet may hold at most {MAX_RUNS:,} "
                            f"runs: sweep fewer values, or split it into several manifests")

    def resolve(p):
        p = os.path.expanduser(str(p))
        return p if os.path.isabs(p) else os.path.normpath(os.path.join(base_dir, p))

    # Each option's value is checked once (a sweep's runs repeat them), and the whole
    # command line once per set of options given: what CLI11 checks across options (one
    # excluding another) depends on which are given, each value's own check is made alone.
    checked, kinds, configs = {}, {}, {}

    def check_command(args):
        key = tuple(args)
        if key not in checked:
            try:
                _check_command(args)
                checked[key] = None
            except ValueError as e:
                checked[key] = _cli_message(e)
        return checked[key]

    def option_kind(option):
        # "flag" (takes no value), "value", or "unknown" (not an option of `ndtcu localize`).
        if option not in kinds:
            msg = check_command(_PROBE + ["--" + option])
            kinds[option] = "flag" if msg is None else "unknown" if "not expected" in msg else "value"
        return kinds[option]

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
            given = {}
            for k, v in source.items():
                option = option_name(k)
                if option in given:
                    fail(label if what == "settings" else "defaults",
                         f"{what}.{option}: given twice (as '{given[option]}' and '{k}'); give it once")
                given[option] = k
                settings[option] = (v, what)
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
            scans = resolve(fields["scans"])
            if not is_bag(scans):
                # As `ndtcu localize` refuses it, when it runs (apps/localize/inputs.cpp).
                fail(label, f"topic: {fields['topic']}: {scans} is not a rosbag (a topic is read from a bag: a "
                            f"folder or a list of scans has none)")
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
                    if p not in configs:
                        import ndtcu

                        try:
                            ndtcu.check_autoware_config(p)
                            configs[p] = None
                        except ndtcu.Error as e:
                            configs[p] = str(e)
                    if configs[p] is not None:
                        fail(label, f"{field}.{option}: {configs[p]}")
                a = [a[0], p]
            msg = check_command(_PROBE + a) if a else None
            if msg is not None:
                kind = option_kind(option) if "not expected" in msg else "value"
                if kind == "unknown":
                    fail(label, f"{field}.{option}: unknown option (not an option of `ndtcu localize`; "
                                f"`ndtcu localize --help` lists them)")
                if kind == "flag":
                    got = (f"the text '{value}' (write true or false without quotes)" if isinstance(value, str)
                           else f"{value!r}")
                    fail(label, f"{field}.{option}: a flag: expected true or false, got {got}")
                fail(label, f"{field}.{option}: {msg}")
            return a

        base_args = list(args)
        for option, (value, field) in settings.items():
            base_args += setting_args(option, value, field)
        sweep = raw.get("sweep", defaults.get("sweep")) or {}
        if not isinstance(sweep, dict):
            fail(label, "sweep: expected a mapping of option: [values]")
        grid, given = [], {}
        for k, values in sweep.items():
            option = option_name(k)
            if not isinstance(values, list) or not values:
                fail(label, f"sweep.{option}: expected a non-empty list of values")
            if option in settings:
                fail(label, f"sweep.{option}: also in settings (give it in one place)")
            if option in given:
                fail(label, f"sweep.{option}: given twice (as '{given[option]}' and '{k}'); give it once")
            given[option] = k
            grid.append((option, [setting_args(option, v, "sweep") for v in values], values))
        base = fields.get("name")
        if base is not None:
            if not isinstance(base, str) or not base.strip():
                fail(label, "name: expected a non-empty text")
            problem = name_problem(base)
            if problem:
                fail(label, f"name: {problem}")
        else:
            stem = os.path.basename(os.path.normpath(str(fields["scans"])))
            base = _safe_name(os.path.splitext(stem)[0] if os.path.isfile(resolve(fields["scans"])) else stem)
        shapes = set()
        for combo in itertools.product(*[list(zip(vs, args_of)) for _, args_of, vs in grid]):
            run_args = list(base_args)
            params = {}
            for (option, _, _), (value, a) in zip(grid, combo):
                run_args += a
                params[option] = value
            # The whole command line together (options that exclude each other), once per
            # set of options given (a flag swept to false is not given).
            shape = tuple(a for a in run_args if a.startswith("--"))
            if shape not in shapes:
                msg = check_command(run_args)
                if msg is not None:
                    fail(label, f"settings: {msg}")
                shapes.add(shape)
            name = base if not grid else _safe_name(base + "-" + "-".join(
                _sweep_label(o, v) for (o, _, _), (v, _) in zip(grid, combo)))
            if len(name) > MAX_NAME_LENGTH:
                fail(label, f"name: the run {_shown(name)}{' (of the sweep)' if grid else ''} is {len(name)} "
                            f"characters long; a run's name may hold at most {MAX_NAME_LENGTH} (it names the "
                            f"run's folder): give a shorter 'name'")
            if name in names:
                fail(label, f"name: the run '{name}' is also made by {names[name]} (names must differ: give "
                            f"'name')")
            names[name] = label
            runs.append(Run(name, entry, run_args, params, base))
    import ndtcu

    identities = {}
    for run in runs:
        run.key = run_key(run, ndtcu.__version__, identities)
    return Manifest(path, runs)
