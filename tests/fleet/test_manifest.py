"""The manifest is checked whole before anything starts: every error names the entry and
the field (no Ray needed)."""
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
    ({"settings": {"voxel": -1}}, r"runs\[0\] \(s\): settings.voxel: --voxel: value -1 is below 0$"),
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
