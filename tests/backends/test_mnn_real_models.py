"""MNN on real pretrained models and real photos, against onnx's reference evaluator.

MobileNetV2 (the recipe, ImageNet weights from their pinned package) and the official YOLOv4-tiny,
side by side with ONNX Runtime as ``compare -b onnxruntime -b mnn`` runs them: f32 element-wise, and
the task metric (top-1 agreement, mAP@0.5) on the photos; each reduced precision only where
``MnnBackend.precisions`` offers it here, else "not supported here" in the report.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import deploykit
from tests.assets.paths import darknet_image, missing_asset, yolov4_detector_photo

PHOTOS = ("dog.jpg", "eagle.jpg", "giraffe.jpg", "horses.jpg", "person.jpg")


@pytest.fixture(scope="module")
def photos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    reason = deploykit.get_backend("mnn").unavailable_reason()
    if reason:
        missing_asset("the mnn backend's runtime", reason)
    folder = tmp_path_factory.mktemp("photos")
    for name in PHOTOS:
        shutil.copy(darknet_image(name), folder / name)
    shutil.copy(yolov4_detector_photo("bus.jpg"), folder / "bus.jpg")
    return folder


def _check(report: deploykit.VerificationReport, metric: str) -> None:
    rows = {(v.candidate.split(":")[0], v.precision): v for v in report.verdicts}
    for backend in ("onnxruntime", "mnn"):
        f32 = rows[backend, "f32"]
        assert f32.status == "pass" and f32.rule == "element-wise", f32.describe()
        assert f32.oracle.independent, "judged against onnx's reference evaluator"
    offered = deploykit.get_backend("mnn").precisions("cpu")
    for precision in ("f16", "bf16"):
        if precision not in offered:
            assert any(f"mnn:cpu {precision}: not supported here" in n for n in report.notes), report.notes
            continue
        verdict = rows["mnn", precision]
        assert verdict.status == "pass" and verdict.task is not None and verdict.task.metric == metric
        assert verdict.task.value >= verdict.task.threshold, verdict.describe()


@pytest.mark.slow
def test_mobilenet_v2_matches_the_oracle_like_onnxruntime(mobilenet, photos):
    report = deploykit.compare(
        mobilenet, ["onnxruntime:cpu", "mnn:cpu"], deploykit.VerifySettings(precision="f32,f16,bf16"), inputs=photos
    )
    _check(report, "top-1 agreement")


@pytest.mark.slow
def test_yolov4_tiny_matches_the_oracle_like_onnxruntime(yolov4_tiny, photos):
    report = deploykit.compare(
        yolov4_tiny, ["onnxruntime:cpu", "mnn:cpu"], deploykit.VerifySettings(precision="f32,f16,bf16"), inputs=photos
    )
    _check(report, "mAP@0.5")


@pytest.mark.slow
def test_detector_takes_mnn_like_any_backend(yolov4_tiny, photos):
    from deploykit.vision.image import load_image

    image = load_image(photos / "bus.jpg")
    with deploykit.Detector(yolov4_tiny, "mnn") as mnn, deploykit.Detector(yolov4_tiny, "onnxruntime") as ort:
        found, expected = mnn(image), ort(image)
    assert {d.label for d in found} >= {"bus", "person"}
    assert [d.label for d in found] == [d.label for d in expected]
