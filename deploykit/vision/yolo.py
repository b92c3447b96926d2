"""Decoding YOLO heads in numpy: raw Darknet ``[yolo]``/``[region]`` outputs → detection rows.

A row is cx, cy, w, h (relative to the network input), objectness, then objectness × class
probability per class — the layout of ``convert darknet --head decoded`` and of OpenCV 4.x's
Darknet importer. Rows are ordered (grid y, grid x, anchor). ``head_candidates`` gives the same rows
less those that no threshold of ``conf`` would keep, decoding only the anchors that can pass it: what the
Detector runs per frame. ``decode_head`` decodes every anchor (the oracles compare all of them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np


def decode_head(raw: np.ndarray, head: Mapping[str, Any]) -> np.ndarray:
    """One head's raw output ``[B, A*(5+C), H, W]`` (activations already applied, as Darknet
    leaves them) → rows ``[B, H*W*A, 5+C]``, every anchor."""
    rows = []
    for image in head_grid(raw, head):
        count, _, h, w = image.shape
        y, x, anchor = np.indices((h, w, count)).reshape(3, -1)  # (y, x, anchor): the row order
        rows.append(decode_anchors(image, head, y, x, anchor))
    return np.stack(rows)


def decode_heads(outputs: Mapping[str, np.ndarray], heads: Sequence[Mapping[str, Any]]) -> np.ndarray:
    """All raw heads of a model, decoded and concatenated in head order."""
    return np.concatenate([decode_head(outputs[head["output"]], head) for head in heads], axis=1)


def head_grid(raw: np.ndarray, head: Mapping[str, Any]) -> np.ndarray:
    """A head's raw output ``[B, A*(5+C), H, W]`` as ``[B, A, 5+C, H, W]`` float32, without a copy where it is one."""
    batch, _, h, w = raw.shape
    grid = raw.reshape(batch, len(head["anchors"]), 5 + int(head["classes"]), h, w)
    return grid if grid.dtype == np.float32 else grid.astype(np.float32)


def reachable_anchors(grid: np.ndarray, conf: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(y, x, anchor) of one image's anchors (``grid``: ``[A, 5+C, H, W]``) whose best class score can exceed
    ``conf``, in ``decode_head``'s row order.

    A score is objectness × class probability and rounding is monotonic, so no score of an anchor exceeds
    the larger of objectness × (the image's largest class probability) and objectness × (its smallest),
    whatever the signs: the test reads one number per anchor and two per image.
    """
    objectness = grid[:, 4].transpose(1, 2, 0)  # (y, x, anchor): the order of decode_head's rows
    probabilities = grid[:, 5:]
    low, high = probabilities.min(), probabilities.max()
    y, x, anchor = np.nonzero((objectness * high > conf) | (objectness * low > conf))
    return y, x, anchor


def decode_anchors(
    grid: np.ndarray, head: Mapping[str, Any], y: np.ndarray, x: np.ndarray, anchor: np.ndarray
) -> np.ndarray:
    """Rows (``decode_head``'s, bit for bit) of one image's chosen anchors; ``grid``: ``[A, 5+C, H, W]``."""
    _, _, h, w = grid.shape
    anchors = np.asarray(head["anchors"], dtype=np.float32)
    chosen = grid[anchor, :, y, x]  # (N, 5 + classes)
    cx = (chosen[:, 0] + x.astype(np.float32)) / w
    cy = (chosen[:, 1] + y.astype(np.float32)) / h
    if head["type"] == "yolo":
        net_h, net_w = head["input_size"]
        scale_w, scale_h = anchors[:, 0] / net_w, anchors[:, 1] / net_h
        if head.get("new_coords"):
            bw, bh = 4 * chosen[:, 2] ** 2, 4 * chosen[:, 3] ** 2
        else:
            bw, bh = np.exp(chosen[:, 2]), np.exp(chosen[:, 3])
    else:  # region anchors are in grid cells
        scale_w, scale_h = anchors[:, 0] / w, anchors[:, 1] / h
        bw, bh = np.exp(chosen[:, 2]), np.exp(chosen[:, 3])
    objectness = chosen[:, 4]
    box = np.stack([cx, cy, bw * scale_w[anchor], bh * scale_h[anchor], objectness], axis=1)
    return np.concatenate([box, chosen[:, 5:] * objectness[:, None]], axis=1)


def head_candidates(raw: np.ndarray, head: Mapping[str, Any], conf: float) -> list[np.ndarray]:
    """One head's raw output → per image, the rows of ``decode_head`` (bit for bit, in its order) less those of
    anchors whose best score cannot exceed ``conf``: only the anchors that can are decoded (a 416 YOLOv4-tiny
    keeps about ten of 2535 at 0.25 on a photo)."""
    return [decode_anchors(image, head, *reachable_anchors(image, conf)) for image in head_grid(raw, head)]
