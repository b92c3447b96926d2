"""The task registry: one spelling per task, recognised from outputs and metadata, one box matcher."""

from __future__ import annotations

import pytest

from deploykit.errors import UsageError
from deploykit.metadata import TASKS as METADATA_TASKS
from deploykit.tasks import TASKS
from deploykit.tasks.detect import match_detections
from deploykit.tasks.registry import pipeline_tasks, recognise, task_class
from deploykit.tensors import TensorSpec
from deploykit.vision.results import Detection


def test_one_spelling_per_task_everywhere():
    assert tuple(TASKS) == METADATA_TASKS
    assert {"detect", "classify"} <= set(pipeline_tasks())
    for name in TASKS:
        assert task_class(name).name == name
    with pytest.raises(UsageError, match=r"task 'classifier' \| is not one of detect, classify"):
        task_class("classifier")


def test_a_classifier_is_recognised_by_its_output_or_its_metadata():
    wide = {"logits": TensorSpec("logits", "float32", ("batch", 10))}
    narrow = {"logits": TensorSpec("logits", "float32", (1, 3))}
    assert recognise(wide, {}).name == "classify"
    assert recognise(narrow, {}) is None
    assert recognise(narrow, {"deploykit.task": "classify"}).name == "classify"


def test_the_one_matcher_pairs_boxes_as_coco_does():
    def box(label: str, score: float, *xyxy: float) -> Detection:
        return Detection(label, 0 if label == "dog" else 1, score, xyxy)

    reference = [box("dog", 0.9, 0, 0, 10, 10), box("cat", 0.9, 20, 20, 30, 30)]
    # the higher-scoring candidate takes the dog; the second dog and the misplaced cat are left over
    candidate = [box("dog", 0.5, 1, 0, 10, 10), box("dog", 0.8, 0, 0, 10, 10), box("cat", 0.7, 0, 0, 10, 10)]
    match = match_detections(reference, candidate, iou=0.5)
    assert match.pairs == ((1, 0),) and match.missing == (1,) and match.extra == (0, 2) and not match.same
    assert match_detections(reference, reference).same
