"""``--images`` with class folders: each candidate's top-1 accuracy against the true classes (and the
f32 oracle's own), a stratified split, and a clear error for folders that name no label.

The expected accuracy is computed here, independently: the f32 model's answer through the app's
Classifier on ONNX Runtime, image by image, against the folder each image lies in.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import deploykit
from cli.main import app
from deploykit.optimize import read_bundle
from deploykit.optimize.candidates import split_images


@pytest.fixture(scope="module")
def class_folders(classifier_path, photos, tmp_path_factory) -> Path:
    """The 12 photos in folders named after the class the f32 classifier gives them, except every
    third photo, filed under the next class: a ground truth the model gets partly wrong."""
    folder = tmp_path_factory.mktemp("classes")
    with deploykit.Classifier(classifier_path, "onnxruntime") as classifier:
        labels = list(classifier.labels)
        for number, photo in enumerate(sorted(photos.iterdir())):
            predicted = classifier(photo, top_k=1)[0].class_id
            truth = labels[(predicted + 1) % len(labels)] if number % 3 == 0 else labels[predicted]
            (folder / truth).mkdir(exist_ok=True)
            shutil.copy(photo, folder / truth / photo.name)
    return folder


def _oracle_accuracy(model: Path, images: Path, files: list[str]) -> float:
    with deploykit.Classifier(model, "onnxruntime") as classifier:
        right = [classifier(images / f, top_k=1)[0].label == Path(f).parent.name for f in files]
    return sum(right) / len(right)


def test_class_folders_give_top1_accuracy_in_the_report_and_the_bundle(classifier_path, class_folders, tmp_path):
    output = tmp_path / "deploy"
    result = CliRunner().invoke(app, ["optimize", str(classifier_path), "--images", str(class_folders), "-o",
                                      str(output), "-b", "onnxruntime", "--threads", "1", "--engine", "ort",
                                      "--time-budget", "40s"])  # fmt: skip
    assert result.exit_code == 0, result.output
    report = read_bundle(output).report()
    files = list(report.settings.accuracy_files)
    assert len(files) == report.settings.accuracy_images == 6 and all("/" in f for f in files)
    expected = _oracle_accuracy(classifier_path, class_folders, files)
    assert 0 < expected < 1  # the folders are partly wrong: a figure that says something
    truth = report.ground_truth
    assert truth is not None and truth.images == 6 and truth.reference == report.oracle.name
    assert truth.reference_top1_accuracy == pytest.approx(expected)
    assert set(truth.classes) == {Path(f).parent.name for f in files}
    for candidate in report.candidates:
        if candidate.verdict is None:
            continue
        assert candidate.top1_accuracy is not None, candidate.label
        if candidate.variant == "float" and candidate.config.precision == "f32" and candidate.verdict.passed:
            assert candidate.top1_accuracy == pytest.approx(expected)  # element-wise equal to the oracle
        agreement = 1 - (candidate.accuracy_delta or 0)  # the delta stays top-1 agreement with the oracle
        assert abs(candidate.top1_accuracy - expected) <= 1 - agreement + 1e-9
    manifest = json.loads((output / "deploykit.json").read_text())
    assert manifest["accuracy"]["reference_top1_accuracy"] == pytest.approx(expected)
    assert manifest["accuracy"]["top1_accuracy"] == report.best.top1_accuracy
    assert "top-1 accuracy against the class folders" in result.output and f"{expected:.2%}" in result.output


def test_the_split_is_stratified(tmp_path):
    import cv2

    folder = tmp_path / "three"
    png = cv2.imencode(".png", np.zeros((4, 4, 3), np.uint8))[1].tobytes()  # whole files: a set is checked first
    for name, count in (("a", 5), ("b", 4), ("c", 3)):
        (folder / name).mkdir(parents=True)
        for index in range(count):
            (folder / name / f"{index}.png").write_bytes(png)
    for seed in range(5):
        calibration, accuracy = split_images(folder, quantize=True, seed=seed)
        assert {label for _, label in calibration} == {label for _, label in accuracy} == {"a", "b", "c"}
        assert len(accuracy) == 6 and not {p for p, _ in calibration} & {p for p, _ in accuracy}
        _, everything = split_images(folder, quantize=False, seed=seed)
        assert len(everything) == 12


def test_class_folders_that_name_no_label_are_an_error(classifier_path, class_folders, tmp_path):
    images = tmp_path / "images"
    shutil.copytree(class_folders, images)
    first, second = sorted(p.name for p in images.iterdir())[:2]
    (images / first).rename(images / "kittens")
    (images / second).rename(images / second.replace("class_", "Class-"))  # a near miss
    result = CliRunner().invoke(app, ["optimize", str(classifier_path), "--images", str(images), "-o",
                                      str(tmp_path / "deploy")])  # fmt: skip
    assert result.exit_code == 1 and "Traceback" not in result.output
    near = second.replace("class_", "Class-")
    assert f"class folder(s) '{near}', 'kittens' name none of the model's labels" in result.output
    assert f"'{near}': did you mean '{second}'?" in result.output
    assert "'class_0', 'class_1'" in result.output and "(10 in all)" in result.output
    assert not (tmp_path / "deploy").exists()
