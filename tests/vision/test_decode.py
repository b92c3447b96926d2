"""Ultralytics (YOLOv8/v11) and YOLOv5 rows against a reference decode written here row by row.

The reference reads each anchor's row in the output's own layout in plain Python: its class scores
(YOLOv5: objectness × class probability, the float32 product), the best class (the lower index on a
tie), kept when above the threshold, then greedy per-class suppression in float64 (``reference_nms``).
``candidates`` picks the rows that can pass before it reads scores row by row; the detections must be
the reference's: classes and scores exactly, boxes within float32 rounding. A filter that leaves out a
row that could pass fails these tests (two broken filters are checked to).
"""

from __future__ import annotations

import cv2
import numpy as np
import pytest

import deploykit
from deploykit.vision import decode
from deploykit.vision.decode import DetectionLayout, candidates, decode_detections
from deploykit.vision.preprocess import PreprocessOverrides
from tests.assets.paths import darknet_image, nudenet_model
from tests.vision.test_yolo import PHOTOS, reference_nms


def _reference_rows(raw: np.ndarray, layout: str, conf: float) -> list[tuple]:
    """(cx, cy, w, h, score, class) of every row of image 0 whose best score is above ``conf``."""
    rows = raw[0].T if layout == "ultralytics" else raw[0]
    found = []
    for row in rows:
        if layout == "ultralytics":
            scores = list(row[4:])
        else:
            scores = [row[4] * probability for probability in row[5:]]  # float32 products
        best = max(range(len(scores)), key=lambda c: (scores[c], -c))
        if scores[best] > conf:
            found.append((*(float(v) for v in row[:4]), float(scores[best]), best))
    return found


def _check(raw: np.ndarray, layout: str, conf: float, iou: float = 0.45) -> int:
    """``decode_detections`` equals the reference on ``raw``; how many detections there were."""
    classes = raw.shape[1] - 4 if layout == "ultralytics" else raw.shape[2] - 5
    expected = reference_nms(_reference_rows(raw, layout, conf), iou)
    (ours,) = decode_detections(DetectionLayout(layout, classes), {"o": raw}, (640, 640), conf=conf, iou=iou)
    assert [d.class_id for d in ours] == [e[5] for e in expected]
    assert [d.score for d in ours] == [e[4] for e in expected]
    boxes = np.array([d.xyxy for d in ours]).reshape(-1, 4)
    np.testing.assert_allclose(boxes, np.array([e[:4] for e in expected]).reshape(-1, 4), atol=1e-3)
    return len(ours)


@pytest.fixture(scope="module")
def yolov8_outputs():
    """nudenet's YOLOv8n ([1, 22, 2100]) on Darknet's photos and one 1280×720 frame (BGR: see test_vision)."""
    with deploykit.Detector(nudenet_model(), preprocess=PreprocessOverrides(channel_order="BGR")) as detector:
        photos = [cv2.imread(str(darknet_image(name))) for name in PHOTOS]
        photos.append(cv2.resize(photos[5], (1280, 720)))
        yield [next(iter(detector._infer(detector._prepare(photo)[0]).values())) for photo in photos]


@pytest.mark.parametrize("conf", [0.25, 0.05])
def test_ultralytics_detections_match_the_reference_on_real_photos(yolov8_outputs, conf):
    assert sum(_check(raw, "ultralytics", conf) for raw in yolov8_outputs) >= 5


def _signed(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Outputs that are not probabilities (negative scores, as a badly quantized model may give), boxes in
    input pixels."""
    raw = rng.normal(0, 1.5, shape).astype(np.float32)
    boxes = (slice(None), slice(0, 4)) if shape[1] < shape[2] else (slice(None), slice(None), slice(0, 4))
    raw[boxes] = np.abs(raw[boxes]) * 100
    return raw


@pytest.mark.parametrize("seed", range(3))
def test_rows_left_out_could_not_pass_whatever_the_signs(seed):
    rng = np.random.default_rng(seed)
    for conf in (0.0, 0.3, 1.0, 3.0):
        _check(_signed(rng, (1, 4 + 6, 300)), "ultralytics", conf)
        _check(_signed(rng, (1, 300, 5 + 6)), "yolov5", conf)


def test_yolov5_rows_with_real_scores_match_the_reference(yolov8_outputs):
    """YOLOv5's layout from real scores: the YOLOv8n rows with an objectness column (the best class score)
    and class probabilities (the scores over it), so the products are what a YOLOv5 head gives."""
    found = 0
    for raw in yolov8_outputs:
        rows = raw[0].T
        objectness = rows[:, 4:].max(axis=1, keepdims=True)
        v5 = np.concatenate([rows[:, :4], objectness, rows[:, 4:] / np.maximum(objectness, 1e-6)], axis=1)[None]
        found += _check(v5.astype(np.float32), "yolov5", 0.25)
    assert found >= 5


def test_without_a_threshold_every_row_is_a_candidate(yolov8_outputs):
    """person.jpg: nudenet finds people in it."""
    layout = DetectionLayout("ultralytics", 18)
    ((boxes, scores),) = candidates(layout, {"o": yolov8_outputs[5]}, (320, 320))
    assert boxes.shape == (2100, 4) and scores.shape == (2100, 18)
    ((few, _),) = candidates(layout, {"o": yolov8_outputs[5]}, (320, 320), 0.25)
    assert 0 < len(few) < 2100 / 10


def test_broken_filters_fail_the_reference(monkeypatch):
    """The tests above can fail: a filter that skips class 0, or that ignores negative objectness, drops rows
    that pass."""
    rng = np.random.default_rng(0)
    ultralytics, yolov5 = _signed(rng, (1, 4 + 6, 300)), _signed(rng, (1, 300, 5 + 6))

    def skips_class_0(image, conf):
        image = image[:, image[5:].max(axis=0) > conf]
        return image.T[:, :4], image.T[:, 4:]

    def positive_objectness_only(image, conf):
        image = image[image[:, 4] * image[:, 5:].max() > conf]
        return image[:, :4], image[:, 5:] * image[:, 4:5]

    monkeypatch.setattr(decode, "_ultralytics_rows", skips_class_0)
    with pytest.raises(AssertionError):
        _check(ultralytics, "ultralytics", 0.3)
    monkeypatch.setattr(decode, "_yolov5_rows", positive_objectness_only)
    with pytest.raises(AssertionError):
        _check(yolov5, "yolov5", 0.3)
