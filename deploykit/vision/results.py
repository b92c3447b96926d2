"""What pipelines return: small JSON-serialisable dataclasses, and a drawing helper."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Detection:
    """One detected object; ``xyxy`` in original-image pixels."""

    label: str
    class_id: int
    score: float
    xyxy: tuple[float, float, float, float]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Classification:
    label: str
    class_id: int
    score: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Timing:
    """Milliseconds spent in each stage of one pipeline call."""

    pre_ms: float
    infer_ms: float
    post_ms: float

    @property
    def total_ms(self) -> float:
        return self.pre_ms + self.infer_ms + self.post_ms

    def to_dict(self) -> dict[str, float]:
        return {**asdict(self), "total_ms": self.total_ms}


def _colour(class_id: int) -> tuple[int, int, int]:
    hue = (class_id * 0.618033988749895) % 1.0
    rgb = np.array([abs(hue * 6 - 3) - 1, 2 - abs(hue * 6 - 2), 2 - abs(hue * 6 - 4)]).clip(0, 1)
    return int(rgb[2] * 255), int(rgb[1] * 255), int(rgb[0] * 255)


def draw(image: np.ndarray, detections: Sequence[Detection], *, thickness: int = 2) -> np.ndarray:
    """A copy of a BGR image with boxes and 'label score' captions."""
    import cv2

    canvas = image.copy()
    for detection in detections:
        x1, y1, x2, y2 = (round(v) for v in detection.xyxy)
        colour = _colour(detection.class_id)
        cv2.rectangle(canvas, (x1, y1), (x2, y2), colour, thickness)
        caption = f"{detection.label} {detection.score:.2f}"
        (text_w, text_h), baseline = cv2.getTextSize(caption, cv2.FONT_HERSHEY_SIMPLEX, 0.5, 1)
        top = max(y1 - text_h - baseline - 2, 0)
        cv2.rectangle(canvas, (x1, top), (x1 + text_w + 2, top + text_h + baseline + 2), colour, -1)
        cv2.putText(
            canvas, caption, (x1 + 1, top + text_h + 1), cv2.FONT_HERSHEY_SIMPLEX, 0.5, (0, 0, 0), 1, cv2.LINE_AA
        )
    return canvas
