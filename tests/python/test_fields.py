"""The library's one list of fields (ndtcu.settings_fields()) against the Python module:
every settings field an attribute, a keyword argument and a part of repr(), every result
field an attribute and a key of to_dict()."""
import ndtcu


def test_every_listed_field_is_an_attribute_a_keyword_and_in_repr(sample):
    """ndtcu.settings_fields() is the library's one list: each settings field is an
    attribute, a keyword argument of Aligner or Localizer and in __repr__; each result
    field an attribute and a key of to_dict()."""
    fields = ndtcu.settings_fields()
    assert {"resolution", "outlier_ratio", "min_points_per_voxel", "pose_covariance"} <= set(fields["AlignSettings"])
    assert fields["ExecutionOptions"] == ["backend", "threads", "device", "gpu_loop"]
    assert not set(fields["ExecutionOptions"]) & set(fields["AlignSettings"])
    assert {"nvtl_threshold", "recovery", "min_frame_points"} <= set(fields["LocalizerSettings"])
    for cls, makers, held in (("AlignSettings", (ndtcu.Aligner,), "settings"),
                              ("LocalizerSettings", (ndtcu.Localizer,), "settings"),
                              ("ExecutionOptions", (ndtcu.Aligner, ndtcu.Localizer), "execution")):
        settings = getattr(ndtcu, cls)()
        text = repr(settings)
        assert text.startswith(cls + "(")
        for name in fields[cls]:
            assert hasattr(settings, name), (cls, name)
            assert f"{name}={getattr(settings, name)!r}" in text, (cls, name)
            value = getattr(settings, name)
            for make in makers:
                assert getattr(getattr(make(**{name: value}), held), name) == value, (cls, name, make)
            if cls == "ExecutionOptions":
                assert getattr(getattr(ndtcu, cls)(**{name: value}), name) == value, (cls, name)
    result = ndtcu.Aligner(backend="cpu", threads=2)
    result.set_target(ndtcu.read_point_cloud(str(sample / "map.pcd")))
    r = result.align(ndtcu.read_point_cloud(str(sample / "scans" / "000000.pcd")))
    d = r.to_dict()
    for name in fields["AlignResult"]:
        assert hasattr(r, name) and name in d, name


def test_an_integer_setting_beyond_its_type_is_a_value_error_naming_the_field_and_its_range():
    """max_iterations=2**40 raised nanobind's TypeError ("incompatible function
    arguments"): an integer the field's type cannot hold is a ValueError naming the field
    and its range, as an attribute and as a keyword; one the type holds but the range does
    not is still ndtcu.Error where the settings are checked."""
    import pytest

    expected = r"^max_iterations: 1099511627776 is out of range; it must be in \[1, 1000\]$"
    with pytest.raises(ValueError, match=expected):
        ndtcu.Aligner(backend="cpu", max_iterations=2**40)
    settings = ndtcu.AlignSettings()
    with pytest.raises(ValueError, match=expected):
        settings.max_iterations = 2**40
    assert settings.max_iterations == ndtcu.AlignSettings().max_iterations  # unchanged
    with pytest.raises(ValueError, match=r"^min_frame_points: -1 is out of range; it must be "):
        ndtcu.LocalizerSettings().min_frame_points = -1
    with pytest.raises(ValueError, match=r"^threads: 1099511627776 is out of range; it must be in \[0, "):
        ndtcu.ExecutionOptions(threads=2**40)
    with pytest.raises(TypeError, match=r"^max_iterations: expected an integer, got float$"):
        settings.max_iterations = 2.5
    settings.max_iterations = 7
    assert settings.max_iterations == 7
    with pytest.raises(ndtcu.Error, match=r"max_iterations: 100000 \(must be in \[1, 1000\]\)"):
        ndtcu.Aligner(backend="cpu", max_iterations=100_000)
