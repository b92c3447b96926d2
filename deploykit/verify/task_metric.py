"""Task metrics for verdicts on real images: what a user of a classifier or a detector cares about.

For reduced precision an element-wise rule says nothing useful; whether a bf16 or INT8
configuration is still right is whether it picks the same class (top-1 agreement) or finds the
same objects (mAP@0.5 of its detections against the reference's). The model's task is read from
its outputs and metadata (``deploykit.vision.decode``), never guessed from its name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from deploykit.metadata import read_metadata
from deploykit.tensors import TensorSpec
from deploykit.verify.metrics import TaskResult, Thresholds
from deploykit.verify.tasks import classification_agreement, detection_agreement
from deploykit.vision.decode import DetectionLayout, decode_detections, find_layout

MIN_CLASSES = 5
APP_CONF = 0.25
RANKING_CONF = 0.001


def task_of(outputs: Mapping[str, TensorSpec], metadata: Mapping[str, str]) -> str | DetectionLayout | None:
    """A ``DetectionLayout`` for detectors, ``"classifier"`` for one (batch, classes) output, else None."""
    layout = find_layout(outputs, metadata)
    if layout is not None:
        return layout
    task = read_metadata(metadata).task
    if len(outputs) == 1:
        shape = next(iter(outputs.values())).shape
        classes = shape[-1] if shape else None
        if (
            shape is not None
            and len(shape) == 2
            and (task == "classify" or (isinstance(classes, int) and classes >= MIN_CLASSES))
        ):
            return "classifier"
    return None


def _labels(metadata: Mapping[str, str]) -> list[str] | None:
    labels = read_metadata(metadata).labels
    return list(labels) if labels is not None else None


def task_result(
    task: str | DetectionLayout,
    metadata: Mapping[str, str],
    cases: Sequence[Mapping[str, np.ndarray]],
    reference: Sequence[Mapping[str, np.ndarray]],
    candidate: Sequence[Mapping[str, np.ndarray]],
    thresholds: Thresholds,
) -> TaskResult:
    """The candidate's task metric against the reference over every input set (one image each)."""
    if task == "classifier":
        name = next(iter(reference[0]))
        agreement = classification_agreement(
            np.concatenate([r[name].reshape(r[name].shape[0], -1) for r in reference]),
            np.concatenate([c[name].reshape(c[name].shape[0], -1) for c in candidate]),
        )
        value = agreement.top1_agreement
        return TaskResult("classifier", "top-1 agreement", value, thresholds.min_top1_agreement,
                          value >= thresholds.min_top1_agreement, agreement.to_dict())  # fmt: skip
    assert isinstance(task, DetectionLayout)
    labels = _labels(metadata)
    expected: list[Any] = []
    found: list[Any] = []
    for feeds, ref, cand in zip(cases, reference, candidate, strict=True):
        image = next(iter(feeds.values()))
        size = (int(image.shape[-2]), int(image.shape[-1]))
        # the reference's boxes at the app's threshold are the ground truth; the candidate's are ranked
        # down to score 0.001, as COCO evaluates, so a box just under the threshold is not a miss
        expected += decode_detections(task, ref, size, labels=labels, conf=APP_CONF)
        found += decode_detections(task, cand, size, labels=labels, conf=RANKING_CONF)
    detections = detection_agreement(expected, found)
    value = detections.map50
    return TaskResult("detector", "mAP@0.5", value, thresholds.min_map, value >= thresholds.min_map,
                      detections.to_dict())  # fmt: skip
