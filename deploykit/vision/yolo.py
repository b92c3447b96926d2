"""Decoding YOLO heads in numpy: raw Darknet ``[yolo]``/``[region]`` outputs → detection rows.

A row is cx, cy, w, h (relative to the network input), objectness, then objectness × class
probability per class — the layout of ``convert darknet --head decoded`` and of OpenCV 4.x's
Darknet importer. Rows are ordered (grid y, grid x, anchor).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np


def decode_head(raw: np.ndarray, head: Mapping[str, Any]) -> np.ndarray:
    """One head's raw output ``[B, A*(5+C), H, W]`` (activations already applied, as Darknet
    leaves them) → rows ``[B, H*W*A, 5+C]``."""
    batch, _, h, w = raw.shape
    anchors = np.asarray(head["anchors"], dtype=np.float32)
    count, classes = len(anchors), int(head["classes"])
    grid = raw.reshape(batch, count, 5 + classes, h, w).astype(np.float32)
    cols, rows = np.meshgrid(np.arange(w, dtype=np.float32), np.arange(h, dtype=np.float32))
    cx = (grid[:, :, 0] + cols) / w
    cy = (grid[:, :, 1] + rows) / h
    if head["type"] == "yolo":
        net_h, net_w = head["input_size"]
        scale_w, scale_h = anchors[:, 0] / net_w, anchors[:, 1] / net_h
        if head.get("new_coords"):
            bw, bh = 4 * grid[:, :, 2] ** 2, 4 * grid[:, :, 3] ** 2
        else:
            bw, bh = np.exp(grid[:, :, 2]), np.exp(grid[:, :, 3])
    else:  # region anchors are in grid cells
        scale_w, scale_h = anchors[:, 0] / w, anchors[:, 1] / h
        bw, bh = np.exp(grid[:, :, 2]), np.exp(grid[:, :, 3])
    bw = bw * scale_w[None, :, None, None]
    bh = bh * scale_h[None, :, None, None]
    objectness = grid[:, :, 4]
    scores = grid[:, :, 5:] * objectness[:, :, None]
    decoded = np.concatenate([np.stack([cx, cy, bw, bh, objectness], axis=2), scores], axis=2)
    return decoded.transpose(0, 3, 4, 1, 2).reshape(batch, h * w * count, 5 + classes)


def decode_heads(outputs: Mapping[str, np.ndarray], heads: Sequence[Mapping[str, Any]]) -> np.ndarray:
    """All raw heads of a model, decoded and concatenated in head order."""
    return np.concatenate([decode_head(outputs[head["output"]], head) for head in heads], axis=1)
