"""The manifest is checked whole before anything starts: every error names the entry and
the field (no Ray needed)."""
import hashlib
import json
import time

import pytest
import yaml

from ndtcu.fleet import ManifestError, load


def write(tmp_path, doc):
    p = tmp_path / "fleet.yaml"
    p.write_text(yaml.safe_dump(doc, sort_keys=False))
    return p


def base(sample, **extra):
    run = {"name": "s", "map": str(sample / "map.pcd"), "scans": str(sample / "scans")}
    run.update(extra)
    return run


@pytest.mark.parametrize("change, message", [
    ({"mapp": "x"}, r"runs\[0\] \(s\): unknown field 'mapp'"),
    ({"map": "missing.pcd"}, r"runs\[0\] \(s\): map: .*missing.pcd: no such file or folder"),
    ({"reference": "nope.txt"}, r"runs\[0\] \(s\): reference: .*nope.txt: no such file or folder"),
    ({"settings": {"voxle": 0.5}}, r"runs\[0\] \(s\): settings.voxle: unknown option"),
    ({"settings": {"voxel": -1}}, r"runs\[0\] \(s\): settings.voxel: --voxel: value -1 must be >= 0$"),
    ({"settings": {"max_iterations": "many"}}, r"runs\[0\] \(s\): settings.max-iterations: .*many"),
    ({"settings": {"recovery": "pray"}}, r"runs\[0\] \(s\): settings.recovery: .*pray"),
    ({"settings": {"init-from": "absent_tum.txt"}}, r"settings.init-from: .*absent_tum.txt: no such file"),
    ({"settings": {"backend": "cuda"}}, r"settings.backend: not a setting here"),
    ({"settings": {"out": "x"}}, r"settings.out: not a setting here"),
    ({"settings": {"init": [0, 0, 0]}}, r"runs\[0\] \(s\): settings.init: "),
    ({"sweep": {"voxel": 0.5}}, r"sweep.voxel: expected a non-empty list"),
    ({"sweep": {"voxel": [0.5, -2]}}, r"runs\[0\] \(s\): sweep.voxel: .*-2"),
    ({"settings": {"init": [0, 0, 0, 0, 0, 0], "init-from": "SAMPLE/poses_tum.txt"}},
     r"runs\[0\] \(s\): settings: .*(init|excludes)"),
    # A known flag given a text: the wrong type for that option, not an unknown option.
    ({"settings": {"accept-max-iterations": "false"}},
     r"runs\[0\] \(s\): settings.accept-max-iterations: a flag: expected true or false, got the text 'false' "
     r"\(write true or false without quotes\)$"),
    ({"sweep": {"accept_max_iterations": [True, 1]}},
     r"sweep.accept-max-iterations: a flag: expected true or false, got 1$"),
    ({"settings": {"max_range": 50, "max-range": 60}},
     r"runs\[0\] \(s\): settings.max-range: given twice \(as 'max_range' and 'max-range'\)"),
    # A topic is a bag's: with a folder of scans the command would refuse it when it runs.
    ({"topic": "/points"}, r"runs\[0\] \(s\): topic: /points: .*scans is not a rosbag"),
])
def test_bad_entries_are_named(sample, tmp_path, change, message):
    settings = change.get("settings", {})
    for k, v in settings.items():
        if isinstance(v, str) and v.startswith("SAMPLE/"):
            settings[k] = str(sample / v[len("SAMPLE/"):])
    with pytest.raises(ManifestError, match=message):
        load(write(tmp_path, {"runs": [base(sample, **change)]}))


def test_structure_errors(sample, tmp_path):
    with pytest.raises(ManifestError, match="'runs' must be a non-empty list"):
        load(write(tmp_path, {"runs": []}))
    with pytest.raises(ManifestError, match="unknown field 'run'"):
        load(write(tmp_path, {"run": [base(sample)]}))
    with pytest.raises(ManifestError, match=r"runs\[1\]: field 'scans' is missing"):
        load(write(tmp_path, {"runs": [base(sample), {"map": str(sample / "map.pcd")}]}))
    with pytest.raises(ManifestError, match=r"runs\[1\] \(s\): name: the run 's' is also made by runs\[0\]"):
        load(write(tmp_path, {"runs": [base(sample), base(sample)]}))
    bad = tmp_path / "bad.yaml"
    bad.write_text("runs: [\n")
    with pytest.raises(ManifestError, match="not valid YAML"):
        load(bad)
    config = tmp_path / "ndt.param.yaml"
    config.write_text("/**:\n  ros__parameters:\n    ndt:\n      resolution: -2.0\n")
    with pytest.raises(ManifestError, match=r"settings.config: .*resolution"):
        load(write(tmp_path, {"runs": [base(sample, settings={"config": str(config)})]}))


def test_sweep_expands_with_readable_names(sample, tmp_path):
    m = load(write(tmp_path, {
        "defaults": {"settings": {"max-range": 50}},
        "runs": [base(sample, settings={"init_from": str(sample / "poses_tum.txt")},
                      sweep={"voxel": [0.5, 1.0], "max_iterations": [10, 30]})]}))
    assert [r.name for r in m.runs] == ["s-voxel=0.5-max-iterations=10", "s-voxel=0.5-max-iterations=30",
                                        "s-voxel=1.0-max-iterations=10", "s-voxel=1.0-max-iterations=30"]
    a = m.runs[1].args
    assert a[:5] == ["localize", "--map", str(sample / "map.pcd"), "--scans", str(sample / "scans")]
    assert a[a.index("--max-range") + 1] == "50" and a[a.index("--voxel") + 1] == "0.5"
    assert a[a.index("--max-iterations") + 1] == "30"
    assert m.runs[1].params == {"voxel": 0.5, "max-iterations": 30}
    # A flag swept: given, or left out.
    m = load(write(tmp_path, {"runs": [base(sample, sweep={"accept-max-iterations": [True, False]})]}))
    assert [r.name for r in m.runs] == ["s-accept-max-iterations=true", "s-accept-max-iterations=false"]
    assert "--accept-max-iterations" in m.runs[0].args and "--accept-max-iterations" not in m.runs[1].args


def test_relative_paths_and_keys(sample, tmp_path):
    import ndtcu
    from ndtcu.fleet.manifest import run_key

    (tmp_path / "data").symlink_to(sample)
    p = write(tmp_path, {"runs": [{"map": "data/map.pcd", "scans": "data/scans", "settings": {"voxel": 0.5}}]})
    run = load(p).runs[0]
    assert run.name == "scans"
    assert run.args[2] == str(tmp_path / "data" / "map.pcd")
    key = run_key(run, ndtcu.__version__)
    assert key == run_key(load(p).runs[0], ndtcu.__version__)
    p2 = write(tmp_path, {"runs": [{"map": "data/map.pcd", "scans": "data/scans", "settings": {"voxel": 0.6}}]})
    assert run_key(load(p2).runs[0], ndtcu.__version__) != key


def test_a_topic_with_a_bag_passes(sample, bags, tmp_path):
    from ndtcu.fleet.manifest import is_bag

    assert not is_bag(str(sample / "scans")) and not is_bag(str(sample / "poses_tum.txt"))
    assert is_bag(str(tmp_path / "log.MCAP")) and is_bag(str(tmp_path / "log.bag"))
    if bags is None:
        pytest.skip("the sample bags were not written")
    for bag in ("sample_mcap_zstd", "sample_ros1.bag"):
        run = load(write(tmp_path, {"runs": [base(sample, scans=str(bags / bag), topic="/points")]})).runs[0]
        assert run.args[run.args.index("--topic") + 1] == "/points"


def test_a_key_given_twice_is_refused(sample, tmp_path):
    p = tmp_path / "fleet.yaml"
    p.write_text(f"""runs:
  - name: s
    scans: {sample / "scans"}
    map: {sample / "map.pcd"}
    scans: {sample / "scans"}
""")
    with pytest.raises(ManifestError, match=r"fleet.yaml: lines 3 and 5: runs\[0\].scans: the key is given twice in "
                                            r"one mapping .*; give it once$"):
        load(p)
    p.write_text(f"runs: [{{map: {sample / 'map.pcd'}, scans: {sample / 'scans'}, "
                 f"settings: {{voxel: 1, voxel: 2}}}}]\n")
    with pytest.raises(ManifestError, match=r"fleet.yaml: line 1: runs\[0\].settings.voxel: the key is given twice"):
        load(p)
    p.write_text(f"runs: []\ndefaults: {{}}\nruns: [{{map: {sample / 'map.pcd'}, scans: {sample / 'scans'}}}]\n")
    with pytest.raises(ManifestError, match=r"fleet.yaml: lines 1 and 3: runs: the key is given twice"):
        load(p)
    # Aliases and a merge key (whose keys those written override) are no repeat.
    p.write_text(f"""defaults:
  settings: &common {{voxel: 1.0, max-range: 60}}
runs:
  - {{name: a, map: &map {sample / "map.pcd"}, scans: {sample / "scans"}}}
  - name: b
    map: *map
    scans: {sample / "scans"}
    settings: {{<<: *common, voxel: 2.0}}
""")
    b = load(p).runs[1]
    assert b.args[b.args.index("--voxel") + 1] == "2.0" and b.args[b.args.index("--map") + 1] == str(sample / "map.pcd")


def test_an_alias_bomb_is_refused_quickly(sample, tmp_path):
    # Nine levels of nine aliases: 9^9 (387 million) values from a file of 600 bytes.
    levels = ["[lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    levels += [f"[{', '.join([f'*l{i}'] * 9)}]" for i in range(8)]
    lines = "".join(f"        - &l{i} {text}\n" for i, text in enumerate(levels))
    p = tmp_path / "fleet.yaml"
    p.write_text(f"runs:\n  - map: {sample / 'map.pcd'}\n    scans: {sample / 'scans'}\n    settings:\n      init:\n"
                 + lines)
    assert p.stat().st_size < 1000
    t0 = time.monotonic()
    with pytest.raises(ManifestError, match=r"fleet.yaml: line \d+: the manifest holds more than 1,000,000 YAML nodes "
                                            r"with its aliases expanded \(the alias \*l\d at runs\[0\].settings.init"):
        load(p)
    assert time.monotonic() - t0 < 2
    p.write_text(f"runs:\n  - map: {sample / 'map.pcd'}\n    scans: {sample / 'scans'}\n    settings:\n"
                 f"      init: &a [0, 0, 0, 0, 0, *a]\n")
    with pytest.raises(ManifestError, match=r"line 5: runs\[0\].settings.init\[5\]: the alias \*a names a node that "
                                            r"holds it"):
        load(p)


def test_sweeps_are_counted_before_they_are_expanded(sample, tmp_path, monkeypatch):
    from ndtcu.fleet import manifest

    values = [round(0.5 + 0.01 * i, 2) for i in range(100)]
    p = write(tmp_path, {"runs": [base(sample, sweep={o: values for o in ("voxel", "max-range", "step-size",
                                                                          "resolution")})]})
    assert p.stat().st_size < 3000
    t0 = time.monotonic()
    with pytest.raises(ManifestError, match=r"fleet.yaml: the manifest makes 100,000,000 runs \(100,000,000 by "
                                            r"the sweep of runs\[0\] over 4 options\); a fleet may hold at most "
                                            r"100,000 runs"):
        load(p)
    assert time.monotonic() - t0 < 2
    # 1,000 runs: each value checked once, the command line once per set of options.
    calls = []
    check = manifest._check_command
    monkeypatch.setattr(manifest, "_check_command", lambda args: calls.append(args) or check(args))
    p = write(tmp_path, {"runs": [base(sample, settings={"init-from": str(sample / "poses_tum.txt")},
                                       sweep={"voxel": values[:10], "max-range": [10 * i for i in range(1, 11)],
                                              "max-iterations": list(range(1, 11))})]})
    t0 = time.monotonic()
    runs = load(p).runs
    assert time.monotonic() - t0 < 2
    assert len(runs) == 1000 and len(calls) <= 40
    # The key is its definition (manifest.run_key): the arguments, the inputs, the version.
    import ndtcu

    run = runs[-1]
    doc = {"ndtcu": ndtcu.__version__, "args": run.args,
           "inputs": {p: manifest._identity(p) for p in sorted(set(run.inputs))}}
    assert run.key == hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


@pytest.mark.parametrize("name, message", [
    ("x" * 250, r"name: 'x{60}\.\.\.' is 250 characters long; a run's name may hold at most 200"),
    ("a/b", r"name: 'a/b' holds a path separator"),
    (".", r"name: '\.' begins or ends with '\.' or '_'"),
    ("..", r"name: '\.\.' begins or ends"),
    (".tmp-s-12345678", r"name: '\.tmp-s-12345678' begins or ends with '\.' or '_'"),
    ("day 1", r"name: 'day 1' holds ' '; a run's name may hold only ASCII letters, digits and \. _ = \+ -"),
])
def test_run_names_are_checked(sample, tmp_path, capsys, name, message):
    from ndtcu.fleet.__main__ import main

    p = write(tmp_path, {"runs": [base(sample, name=name)]})
    with pytest.raises(ManifestError, match=r"runs\[0\] \(.*\): " + message):
        load(p)
    assert main(["check", str(p)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("ndtcu-fleet: error: ")


def test_a_sweep_name_too_long_is_refused(sample, tmp_path):
    m = load(write(tmp_path, {"runs": [base(sample, name="n" * 200)]}))
    assert m.runs[0].name == "n" * 200
    with pytest.raises(ManifestError, match=r"runs\[0\] \(n+\): name: the run 'n{60}\.\.\.' \(of the sweep\) is 210 "
                                            r"characters long; a run's name may hold at most 200"):
        load(write(tmp_path, {"runs": [base(sample, name="n" * 200, sweep={"voxel": [0.5, 1.0]})]}))
