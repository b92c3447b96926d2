"""YOLO outputs → detections, without a session: layout recognition, candidate boxes, filter + NMS.

The ``Detector`` pipeline and the verification subsystem (detection mAP of one backend against
another on the same pre-processed images) both decode through here, so both read a model's
outputs the same way. Boxes stay in input pixels; mapping back to the original image is the
pipeline's business.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from deploykit.errors import UsageError
from deploykit.metadata import read_metadata
from deploykit.tensors import TensorSpec
from deploykit.vision.nms import nms
from deploykit.vision.yolo import decode_heads, head_candidates

LAYOUTS = {
    "darknet-raw": "raw [yolo]/[region] heads of a deploykit Darknet conversion (metadata deploykit.darknet.heads)",
    "darknet-decoded": "[batch, N, 4+1+classes] rows, box relative to the input (convert darknet --head decoded)",
    "ultralytics": "[batch, 4+classes, N], box in input pixels, no objectness (YOLOv8/v11 exports)",
    "yolov5": "[batch, N, 5+classes], box in input pixels, objectness then class probabilities",
}


@dataclass(frozen=True)
class DetectionLayout:
    """How a model's outputs hold boxes: one of ``LAYOUTS``, its class count, and Darknet heads."""

    name: str
    classes: int
    heads: list[dict[str, Any]] = field(default_factory=list)


def find_layout(outputs: Mapping[str, TensorSpec], metadata: Mapping[str, str]) -> DetectionLayout | None:
    """The detection layout of a model's outputs, or None when they are not one deploykit knows."""
    stored = read_metadata(metadata)
    heads = [dict(h) for h in stored.darknet_heads]
    if heads and all(h["output"] in outputs for h in heads):
        decoded = stored.head == "decoded"
        return DetectionLayout("darknet-decoded" if decoded else "darknet-raw", int(heads[0]["classes"]), heads)
    if len(outputs) == 1:
        shape = next(iter(outputs.values())).shape
        if shape is not None and len(shape) == 3:
            _, second, third = shape
            ultralytics = "names" in metadata and "imgsz" in metadata
            if isinstance(second, int) and (ultralytics or not isinstance(third, int) or third > second) and second > 4:
                return DetectionLayout("ultralytics", second - 4)
            if isinstance(third, int) and third > 5:
                return DetectionLayout("yolov5", third - 5)
    return None


def require_layout(outputs: Mapping[str, TensorSpec], metadata: Mapping[str, str], model: str) -> DetectionLayout:
    """``find_layout``, or a ``UsageError`` that lists the layouts deploykit knows."""
    layout = find_layout(outputs, metadata)
    if layout is None:
        known = "; ".join(f"{name}: {text}" for name, text in LAYOUTS.items())
        shapes = ", ".join(f"{s.name} {s.shape_text()}" for s in outputs.values())
        raise UsageError(
            f"model '{model}' | outputs {shapes} are not a detection layout deploykit knows.",
            hint=f"known layouts — {known}.",
        )
    return layout


def candidates(
    layout: DetectionLayout, outputs: Mapping[str, np.ndarray], size: tuple[int, int], conf: float | None = None
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per image: boxes (cx, cy, w, h in input pixels) and class scores.

    With ``conf``, only the rows whose best score can exceed it (``select`` keeps the same boxes either way,
    in the same order): raw Darknet heads decode only those anchors, Ultralytics and YOLOv5 rows are
    picked before their scores are read row by row; Darknet's decoded rows are given whole.
    """
    height, width = size
    if layout.name == "darknet-raw" and conf is not None:
        per_head = [head_candidates(outputs[head["output"]], head, conf) for head in layout.heads]
        scale = np.array([width, height, width, height], np.float32)
        per_image = [np.concatenate(rows) for rows in zip(*per_head, strict=True)]
        return [(rows[:, :4] * scale, rows[:, 5:]) for rows in per_image]
    if layout.name == "darknet-raw":
        rows = decode_heads(dict(outputs), layout.heads)
    elif layout.name == "darknet-decoded":
        rows = outputs[layout.heads[0]["output"]]
    else:
        rows = next(iter(outputs.values()))
    if layout.name.startswith("darknet"):
        boxes = rows[..., :4] * np.array([width, height, width, height], np.float32)
        return [(boxes[i], rows[i, :, 5:]) for i in range(rows.shape[0])]
    if layout.name == "ultralytics":
        return [_ultralytics_rows(image, conf) for image in rows]
    return [_yolov5_rows(image, conf) for image in rows]


def _ultralytics_rows(image: np.ndarray, conf: float | None) -> tuple[np.ndarray, np.ndarray]:
    """Boxes and class scores of one image's [4 + classes, N] output, as N rows; with ``conf``, only the
    anchors whose best class score exceeds it: exactly the rows ``select`` keeps (a NaN score drops the
    row either way), found by one reduction over the contiguous class planes instead of row by row."""
    if conf is not None:
        image = image[:, image[4:].max(axis=0) > conf]
    rows = image.T
    return rows[:, :4], rows[:, 4:]


def _yolov5_rows(image: np.ndarray, conf: float | None) -> tuple[np.ndarray, np.ndarray]:
    """Boxes and scores (objectness × class probability) of one image's [N, 5 + classes] rows; with ``conf``,
    only the rows whose best score can exceed it. A row's scores are at most objectness × the image's
    largest class probability (its smallest where objectness is negative), and float32 rounding keeps that
    order, so no row ``select`` would keep is left out; the kept rows' scores are the same products."""
    if conf is not None:
        probabilities, objectness = image[:, 5:], image[:, 4]
        largest, smallest = probabilities.max(), probabilities.min()
        image = image[(objectness * largest > conf) | (objectness * smallest > conf)]
    return image[:, :4], image[:, 5:] * image[:, 4:5]


def select(
    boxes: np.ndarray, scores: np.ndarray, *, conf: float, iou: float, agnostic: bool = False, max_detections: int = 300
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Confidence filter and NMS: (boxes xyxy in input pixels, scores, class ids), best first."""
    class_ids = scores.argmax(axis=1)
    best = scores[np.arange(scores.shape[0]), class_ids]
    keep = best > conf
    boxes, best, class_ids = boxes[keep], best[keep], class_ids[keep]
    xyxy = np.concatenate([boxes[:, :2] - boxes[:, 2:] / 2, boxes[:, :2] + boxes[:, 2:] / 2], axis=1)
    kept = nms(xyxy, best, None if agnostic else class_ids, iou=iou, max_detections=max_detections)
    return xyxy[kept], best[kept], class_ids[kept]


def decode_detections(
    layout: DetectionLayout,
    outputs: Mapping[str, np.ndarray],
    size: tuple[int, int],
    *,
    labels: Sequence[str] | None = None,
    conf: float = 0.25,
    iou: float = 0.45,
) -> list[list[Any]]:
    """Detections per image in input pixels (``Detection`` objects), as the Detector would keep them."""
    from deploykit.vision.results import Detection

    names = list(labels) if labels else [f"class_{i}" for i in range(layout.classes)]
    results = []
    for boxes, scores in candidates(layout, outputs, size, conf):
        xyxy, best, class_ids = select(boxes, scores, conf=conf, iou=iou)
        results.append(
            [
                Detection(names[int(c)], int(c), float(s), (float(b[0]), float(b[1]), float(b[2]), float(b[3])))
                for b, s, c in zip(xyxy, best, class_ids, strict=True)
            ]
        )
    return results
