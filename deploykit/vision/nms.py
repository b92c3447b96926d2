"""Non-maximum suppression: OpenCV's C++ implementation where available, vectorised numpy otherwise."""

from __future__ import annotations

import numpy as np


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


def nms(
    boxes_xyxy: np.ndarray,
    scores: np.ndarray,
    class_ids: np.ndarray | None = None,
    *,
    iou: float = 0.45,
    max_detections: int = 300,
) -> np.ndarray:
    """Indices of the boxes kept, best score first.

    With ``class_ids`` boxes only suppress boxes of the same class (class-aware); without, any box
    suppresses any other (agnostic).
    """
    boxes = np.asarray(boxes_xyxy, dtype=np.float32).reshape(-1, 4)
    scores = np.asarray(scores, dtype=np.float32).ravel()
    if boxes.shape[0] == 0:
        return np.zeros(0, dtype=np.int64)
    if class_ids is not None:
        # offset each class into its own region of the plane: one pass does class-aware NMS
        offsets = np.asarray(class_ids, dtype=np.float32).ravel()[:, None] * (float(boxes.max()) + 1.0)
        boxes = boxes + offsets
    try:
        import cv2

        xywh = np.concatenate([boxes[:, :2], boxes[:, 2:] - boxes[:, :2]], axis=1)
        # OpenCV drops scores at or below its (non-negative) threshold: shift so that every box stays
        positive = scores - float(scores.min()) + 1.0
        # lists, not arrays: OpenCV converts an (N, 4) float array to Rect2d four times slower here
        picked = cv2.dnn.NMSBoxes(xywh.tolist(), positive.tolist(), 0.0, iou, top_k=max_detections)
        kept = np.asarray(picked, dtype=np.int64).ravel()
        return kept[np.argsort(-scores[kept], kind="stable")]
    except ImportError:
        return _numpy_nms(boxes, scores, iou, max_detections)
