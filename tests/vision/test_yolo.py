"""YOLO head decoding against a reference written here from Darknet's formulas, on the real YOLOv4-tiny.

The reference walks every anchor of every cell in plain Python, as Darknet's ``get_yolo_box`` does
(``bx = (col + x) / grid_w``, ``bw = exp(tw) · anchor_w / net_w``; scores objectness × class probability,
the best class of each anchor kept when it is above the threshold), then suppresses greedily per class
(higher score first, the lower index first on a tie; IoU in float64). The decoder only decodes the
anchors that can pass the threshold; the detections must be the same: classes and scores exactly,
boxes within float32 rounding.
"""

from __future__ import annotations

import math

import cv2
import numpy as np
import pytest

import deploykit
from deploykit.vision.decode import candidates, decode_detections, select
from deploykit.vision.yolo import head_candidates
from tests.assets.paths import darknet_image

PHOTOS = ("dog.jpg", "eagle.jpg", "giraffe.jpg", "horses.jpg", "kite.jpg", "person.jpg", "scream.jpg")


def _reference_rows(raw: np.ndarray, head: dict, conf: float) -> list[tuple[float, float, float, float, float, int]]:
    """(cx, cy, w, h in input pixels, score, class) of every anchor whose best score is above ``conf``."""
    _, _, grid_h, grid_w = raw.shape
    classes = int(head["classes"])
    net_h, net_w = head["input_size"]
    values = raw[0].reshape(len(head["anchors"]), 5 + classes, grid_h, grid_w)
    rows = []
    for y in range(grid_h):
        for x in range(grid_w):
            for a, (anchor_w, anchor_h) in enumerate(head["anchors"]):
                cell = values[a, :, y, x]
                scores = [cell[4] * cell[5 + c] for c in range(classes)]  # float32 products, as Darknet's
                best = max(range(classes), key=lambda c: (scores[c], -c))
                if scores[best] > conf:
                    cx = (x + float(cell[0])) / grid_w * net_w
                    cy = (y + float(cell[1])) / grid_h * net_h
                    w = math.exp(float(cell[2])) * anchor_w
                    h = math.exp(float(cell[3])) * anchor_h
                    rows.append((cx, cy, w, h, float(scores[best]), best))
    return rows


def _iou(a: tuple[float, ...], b: tuple[float, ...]) -> float:
    width = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    height = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    intersection = width * height
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - intersection
    return intersection / max(union, 1e-9)


def _reference_detections(outputs: dict, heads: list[dict], conf: float, iou: float) -> list[tuple]:
    rows = [row for head in heads for row in _reference_rows(outputs[head["output"]], head, conf)]
    return reference_nms(rows, iou)


def reference_nms(rows: list[tuple], iou: float) -> list[tuple]:
    """Greedy per-class suppression of (cx, cy, w, h, score, class) rows: (x1, y1, x2, y2, score, class) kept."""
    boxes = [(cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2, score, c) for cx, cy, w, h, score, c in rows]
    order = sorted(range(len(boxes)), key=lambda i: (-boxes[i][4], i))
    kept: list[tuple] = []
    for i in order:
        if all(k[5] != boxes[i][5] or _iou(k, boxes[i]) <= iou for k in kept):
            kept.append(boxes[i])
    return kept


@pytest.fixture(scope="module")
def real_outputs(yolov4_tiny):
    """The real model's raw heads on Darknet's photos (and one as a 1280×720 frame), with the detector."""
    detector = deploykit.Detector(yolov4_tiny, "onnxruntime")
    photos = [cv2.imread(str(darknet_image(name))) for name in PHOTOS]
    photos.append(cv2.resize(photos[0], (1280, 720)))
    yield detector, [detector._infer(detector._prepare(photo)[0]) for photo in photos]
    detector.close()


@pytest.mark.parametrize("conf", [0.25, 0.01])
def test_decoded_detections_match_the_reference_on_real_photos(real_outputs, conf):
    detector, all_outputs = real_outputs
    found_any = 0
    for outputs in all_outputs:
        expected = _reference_detections(outputs, detector.heads, conf, 0.45)
        (ours,) = decode_detections(detector._decoding, outputs, detector.size, conf=conf, iou=0.45)
        assert [d.class_id for d in ours] == [e[5] for e in expected]
        assert [d.score for d in ours] == [e[4] for e in expected]  # float32 products, bit for bit
        np.testing.assert_allclose([d.xyxy for d in ours], [e[:4] for e in expected] or np.zeros((0, 4)), atol=1e-3)
        found_any += len(ours)
    assert found_any >= 10  # the photos hold dogs, horses, people: a decoder that finds nothing fails


def test_the_detector_keeps_what_the_reference_keeps(real_outputs):
    detector, _ = real_outputs
    frame = cv2.resize(cv2.imread(str(darknet_image("horses.jpg"))), (1280, 720))
    tensor, placement = detector._prepare(frame)
    expected = _reference_detections(detector._infer(tensor), detector.heads, detector.conf, detector.iou)
    ours = detector(frame)
    assert [(d.label, d.score) for d in ours] == [(detector.labels[e[5]], e[4]) for e in expected]
    np.testing.assert_allclose([d.xyxy for d in ours], placement.to_original(np.array([e[:4] for e in expected])),
                               atol=1e-2)  # fmt: skip
    assert {d.label for d in ours} >= {"horse"}


@pytest.mark.parametrize("seed", range(3))
def test_anchors_left_out_could_not_pass_whatever_the_signs(seed):
    """Outputs that are not probabilities (negative objectness and class values, as a badly quantized model
    may give): leaving anchors out before decoding still keeps every row that can pass."""
    rng = np.random.default_rng(seed)
    head = {"output": "o", "type": "yolo", "classes": 4, "anchors": [[10, 14], [23, 27], [37, 58]],
            "input_size": [64, 64]}  # fmt: skip
    raw = rng.normal(0, 1.5, (1, 3 * 9, 8, 8)).astype(np.float32)
    for conf in (0.0, 0.3, 1.0):
        (rows,) = head_candidates(raw, head, conf)
        expected = _reference_rows(raw, head, conf)
        best = (rows[:, 5:].max(axis=1) > conf) if len(rows) else np.zeros(0, bool)
        assert best.sum() == len(expected)
        np.testing.assert_allclose(
            rows[best][:, :4] * 64, [e[:4] for e in expected] or np.zeros((0, 4)), rtol=1e-5, atol=1e-4
        )


def test_without_a_threshold_every_anchor_is_a_candidate(real_outputs):
    detector, all_outputs = real_outputs
    ((boxes, scores),) = candidates(detector._decoding, all_outputs[0], detector.size)
    assert boxes.shape == (3 * (13 * 13 + 26 * 26), 4)
    ((few, few_scores),) = candidates(detector._decoding, all_outputs[0], detector.size, 0.25)
    assert len(few) < len(boxes) / 10
    for picked, everything in zip(select(few, few_scores, conf=0.25, iou=0.45), select(boxes, scores, conf=0.25,
                                                                                     iou=0.45), strict=True):  # fmt: skip
        assert np.array_equal(picked, everything)
