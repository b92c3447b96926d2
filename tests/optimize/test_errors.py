"""Bad input to optimize: a clear message, exit 1, and nothing written."""

from __future__ import annotations

import shutil

import pytest
from typer.testing import CliRunner

from cli.main import app
from deploykit.errors import InputError, OutputError, UsageError
from deploykit.optimize import OptimizePlan, optimize


def _invoke(*args: str):
    return CliRunner().invoke(app, ["optimize", *map(str, args)])


def test_no_images_without_no_quantize(classifier_path, tmp_path):
    result = _invoke(classifier_path, "-o", tmp_path / "deploy")
    assert result.exit_code == 2
    assert "INT8 needs calibration data" in result.output and "--no-quantize" in result.output
    assert not (tmp_path / "deploy").exists()


def test_too_few_images_states_the_minimum(classifier_path, photos, tmp_path):
    few = tmp_path / "few"
    few.mkdir()
    for photo in sorted(photos.iterdir())[:3]:
        shutil.copy(photo, few / photo.name)
    with pytest.raises(InputError, match=r"holds 3 image\(s\); INT8 needs at least 4"):
        optimize(classifier_path, few, output=tmp_path / "deploy")
    assert not (tmp_path / "deploy").exists()


@pytest.mark.parametrize("where", ["images", "inside-images", "around-model"])
def test_output_onto_an_input(classifier_path, photos, tmp_path, where):
    target = {"images": photos, "inside-images": photos / "deploy", "around-model": classifier_path.parent}[where]
    with pytest.raises(OutputError, match="a bundle is never written onto an input"):
        optimize(classifier_path, photos, output=target, force=True)


def test_output_not_empty_a_file_or_unwritable(classifier_path, photos, tmp_path):
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("mine")
    result = _invoke(classifier_path, "--images", photos, "-o", busy)
    assert result.exit_code == 2 and "is a folder that is not empty" in result.output and "--force" in result.output
    result = _invoke(classifier_path, "--images", photos, "-o", busy, "--force")
    assert result.exit_code == 2 and "--force replaces only a bundle" in result.output
    assert (busy / "notes.txt").read_text() == "mine"
    file = tmp_path / "file"
    file.write_text("x")
    with pytest.raises(OutputError, match="is a file, expected a folder"):
        optimize(classifier_path, photos, output=file)
    with pytest.raises(OutputError, match="does not exist"):
        optimize(classifier_path, photos, output=tmp_path / "missing" / "deploy")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_drop": "150%"}, "--max-drop 150%"),
        ({"time_budget": "soon"}, "--time-budget 'soon'"),
        ({"scenario": "multistream"}, "--scenario 'multistream'"),
        ({"engines": ["tensorrt"]}, "--quantizer tensorrt"),
    ],
)
def test_bad_options_fail_before_any_work(classifier_path, photos, tmp_path, options, message):
    with pytest.raises(UsageError, match=message.replace("(", r"\(")):
        optimize(classifier_path, photos, OptimizePlan(**options), output=tmp_path / "deploy")
    assert not (tmp_path / "deploy").exists()


def test_f32_failing_verification_exits_1_without_a_bundle(classifier_path, tmp_path, monkeypatch):
    """A backend whose f32 run dies: no f32 configuration gives the right answer, so there is no answer."""
    monkeypatch.setenv("DEPLOYKIT_BACKENDS", "crasher=tests.assets.crashing_backend:CrashingBackend")
    result = _invoke(classifier_path, "--no-quantize", "-b", "crasher", "--threads", "1", "-o", tmp_path / "deploy")
    assert result.exit_code == 1, result.output
    assert "no f32 configuration gives the right answer" in result.output and "no bundle was written" in result.output
    assert not (tmp_path / "deploy").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging folder left behind
