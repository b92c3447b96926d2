"""ncnn on real pretrained models and real photos, against onnx's reference evaluator.

MobileNetV2 (the recipe, ImageNet weights from their pinned package) and the official YOLOv4-tiny:
f32 element-wise; each reduced precision by the task metric (top-1 agreement, mAP@0.5) where
``NcnnBackend.precisions`` offers it here, and "not supported here" in the report where it does not.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import deploykit
from tests.assets.paths import darknet_image, yolov4_detector_photo

PHOTOS = ("dog.jpg", "eagle.jpg", "giraffe.jpg", "horses.jpg", "person.jpg")


@pytest.fixture(scope="module")
def photos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("photos")
    for name in PHOTOS:
        shutil.copy(darknet_image(name), folder / name)
    shutil.copy(yolov4_detector_photo("bus.jpg"), folder / "bus.jpg")
    return folder


def _check(report: deploykit.VerificationReport, precision: str, metric: str) -> None:
    by_precision = {v.precision: v for v in report.verdicts}
    f32 = by_precision["f32"]
    assert f32.status == "pass" and f32.rule == "element-wise", f32.describe()
    assert f32.oracle.independent, "judged against onnx's reference evaluator"
    if precision not in deploykit.get_backend("ncnn").precisions("cpu"):
        assert any(f"ncnn:cpu {precision}: not supported here" in n for n in report.notes), report.notes
        assert precision not in by_precision
        return
    verdict = by_precision[precision]
    assert verdict.status == "pass", verdict.describe()
    assert verdict.task is not None and verdict.task.metric == metric, verdict.describe()
    assert verdict.task.value >= verdict.task.threshold
    assert verdict.outputs and all(o.max_abs_error > 0 for o in verdict.outputs), "the precision really rounds"


# one compare per model for both reduced precisions: one oracle run and one f32 run serve both
@pytest.mark.slow
def test_mobilenet_v2_f32_element_wise_and_reduced_by_top1(mobilenet, photos):
    report = deploykit.compare(
        mobilenet, ["ncnn:cpu"], deploykit.VerifySettings(precision="f32,bf16,f16"), inputs=photos
    )
    assert report.input_source == "images (6 images)"
    for precision in ("bf16", "f16"):
        _check(report, precision, "top-1 agreement")


@pytest.mark.slow
def test_yolov4_tiny_f32_element_wise_and_reduced_by_map(yolov4_tiny, photos):
    report = deploykit.compare(
        yolov4_tiny, ["ncnn:cpu"], deploykit.VerifySettings(precision="f32,bf16,f16"), inputs=photos
    )
    for precision in ("bf16", "f16"):
        _check(report, precision, "mAP@0.5")


@pytest.mark.slow
def test_detector_takes_ncnn_like_any_backend(yolov4_tiny):
    from deploykit.vision.image import load_image

    image = load_image(yolov4_detector_photo("bus.jpg"))
    with deploykit.Detector(yolov4_tiny, "ncnn") as ncnn, deploykit.Detector(yolov4_tiny, "onnxruntime") as ort:
        found, expected = ncnn(image), ort(image)
    assert {d.label for d in found} >= {"bus", "person"}
    assert [d.label for d in found] == [d.label for d in expected]
