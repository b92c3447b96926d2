"""Non-maximum suppression, exact greedy: the ONNX ``NonMaxSuppression`` operator in a session of
the default backend (ONNX Runtime) where it is installed, OpenCV's ``NMSBoxes`` otherwise, numpy as the last
resort. The answer is the same on every engine: boxes are taken best score first, equal scores in
the order they were given (the lower index is kept), and a box is suppressed by a kept one when
their IoU is above ``iou``. The engines differ only in speed (the compiled kernels are 10-100x
faster than the numpy loop on a few hundred candidates).

Class-aware NMS offsets each class into its own region of the plane, so one pass serves all
classes. Every candidate takes part in the suppression; only the output is cut to ``max_detections``.
"""

from __future__ import annotations

import tempfile
import threading
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from deploykit.backends.base import Session
from deploykit.model import Model

_LOCK = threading.Lock()


def iou_one_to_many(box: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    """IoU of one xyxy box with many."""
    x1 = np.maximum(box[0], boxes[:, 0])
    y1 = np.maximum(box[1], boxes[:, 1])
    x2 = np.minimum(box[2], boxes[:, 2])
    y2 = np.minimum(box[3], boxes[:, 3])
    intersection = np.clip(x2 - x1, 0, None) * np.clip(y2 - y1, 0, None)
    area = (box[2] - box[0]) * (box[3] - box[1])
    areas = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    return intersection / np.maximum(area + areas - intersection, 1e-9)


def _numpy_nms(boxes: np.ndarray, scores: np.ndarray, iou: float, limit: int) -> np.ndarray:
    order = np.argsort(-scores, kind="stable")
    keep: list[int] = []
    while order.size and len(keep) < limit:
        best = order[0]
        keep.append(int(best))
        if order.size == 1:
            break
        order = order[1:][iou_one_to_many(boxes[best], boxes[order[1:]]) <= iou]
    return np.asarray(keep, dtype=np.int64)


@cache
def _onnxruntime_nms() -> Session | None:
    """A one-node ``NonMaxSuppression`` model open on the default backend (ONNX Runtime), or None
    without it."""
    from deploykit.backends.registry import DEFAULT_BACKEND, get_backend

    backend = get_backend(DEFAULT_BACKEND)
    if not backend.is_available():
        return None
    from onnx import TensorProto, helper

    node = helper.make_node("NonMaxSuppression", ["boxes", "scores", "limit", "iou"], ["selected"])
    graph = helper.make_graph(
        [node],
        "nms",
        [
            helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [1, None, 4]),
            helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 1, None]),
            helper.make_tensor_value_info("limit", TensorProto.INT64, [1]),
            helper.make_tensor_value_info("iou", TensorProto.FLOAT, [1]),
        ],
        [helper.make_tensor_value_info("selected", TensorProto.INT64, [None, 3])],
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    proto.ir_version = 8
    with tempfile.TemporaryDirectory(prefix="deploykit-nms-") as folder:  # the runtime reads it at open
        return backend.open(Model.written(proto, Path(folder) / "nms.onnx"), "cpu", threads=1)


def nms(
    boxes_xyxy: np.ndarray,
    scores: np.ndarray,
    class_ids: np.ndarray | None = None,
    *,
    iou: float = 0.45,
    max_detections: int = 300,
) -> np.ndarray:
    """Indices of the boxes kept by greedy NMS, best score first, at most ``max_detections``.

    With ``class_ids`` boxes only suppress boxes of the same class (class-aware); without, any box
    suppresses any other (agnostic).
    """
    boxes = np.asarray(boxes_xyxy, dtype=np.float32).reshape(-1, 4)
    scores = np.asarray(scores, dtype=np.float32).ravel()
    if boxes.shape[0] == 0 or max_detections <= 0:
        return np.zeros(0, dtype=np.int64)
    if class_ids is not None:
        span = float(np.abs(boxes).max()) + 1.0
        boxes = boxes + np.asarray(class_ids, dtype=np.float32).ravel()[:, None] * (2 * span)
    with _LOCK:
        session = _onnxruntime_nms()
    if session is not None:
        feeds = {
            "boxes": boxes[None],
            "scores": scores[None, None],
            "limit": np.array([max_detections], np.int64),
            "iou": np.array([iou], np.float32),
        }
        selected = session.run(feeds)["selected"]
        return selected[:, 2].astype(np.int64)
    try:
        import cv2
    except ImportError:
        return _numpy_nms(boxes, scores, iou, max_detections)
    xywh = np.concatenate([boxes[:, :2], boxes[:, 2:] - boxes[:, :2]], axis=1).astype(np.float64)
    # no top_k: OpenCV would drop candidates before suppression; its threshold must be ≥ 0
    positive = (scores - float(scores.min()) + 1.0).astype(np.float32)
    dnn: Any = cv2.dnn  # its stubs ask for lists; arrays of these dtypes convert fastest
    kept = np.asarray(dnn.NMSBoxes(xywh, positive, 0.0, iou), dtype=np.int64).ravel()
    return kept[np.argsort(-scores[kept], kind="stable")][:max_detections]
