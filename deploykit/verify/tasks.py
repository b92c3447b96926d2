"""Task metrics: does a candidate model give the same *answers* as a reference, not just close numbers?

Reduced precision (bf16, f16, int8) changes every number a little; what matters is whether the
classes and boxes stay the same. Two metrics, both comparing a candidate with a reference run of
the same images (usually the f32 model), so no labelled data set is needed:

- ``classification_agreement``: top-1 agreement, top-5 overlap, and top-1 accuracy when labels
  are given.
- ``detection_agreement``: the reference's detections are the ground truth, the candidate's are
  the predictions; precision, recall and mAP@0.5 (COCO's 101-point interpolated AP, computed by
  pycocotools, averaged over the classes the reference found).

This module only measures; thresholds and verdicts belong to the callers.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from deploykit.errors import BackendUnavailableError, InputError
from deploykit.vision.results import Detection

TOP_K = 5


@dataclass(frozen=True)
class ClassificationAgreement:
    """How often a candidate classifier picks what the reference picks.

    Attributes:
        samples: number of images (rows) compared.
        top1_agreement: fraction of rows whose top-1 class is the same in both.
        top5_overlap: mean over rows of |top-5(reference) ∩ top-5(candidate)| / 5 (top-C when
            there are fewer than 5 classes).
        top1_accuracy: the candidate's top-1 accuracy against ``labels``; None without labels.
        reference_top1_accuracy: the reference's top-1 accuracy against ``labels``; None without labels.
    """

    samples: int
    top1_agreement: float
    top5_overlap: float
    top1_accuracy: float | None
    reference_top1_accuracy: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _scores(name: str, scores: Any) -> np.ndarray:
    array = np.asarray(scores)
    if array.ndim > 2:  # (N, C, 1, 1) classifier heads
        array = array.reshape(array.shape[0], -1)
    if array.ndim != 2 or array.shape[0] == 0 or array.shape[1] == 0 or array.dtype.kind not in "fiu":
        raise InputError(
            f"{name} scores | have shape {array.shape} and dtype {array.dtype}, expected numbers of shape "
            "(samples, classes) with at least one sample and one class.",
            hint="pass the model's logits or probabilities, one row per image.",
        )
    return array.astype(np.float64, copy=False)


def _top_k(scores: np.ndarray, k: int) -> np.ndarray:
    # stable sort: ties keep the lower class index first, in both models alike
    return np.argsort(-scores, axis=1, kind="stable")[:, :k]


def classification_agreement(
    reference_scores: np.ndarray, candidate_scores: np.ndarray, labels: Sequence[int] | None = None
) -> ClassificationAgreement:
    """Compare a candidate classifier's scores with the reference's on the same images.

    Args:
        reference_scores: ``[N, C]`` logits or probabilities of the reference (e.g. f32) model.
        candidate_scores: ``[N, C]`` scores of the candidate (e.g. int8) model, same rows.
        labels: the true class of each row, for top-1 accuracy; None when unknown.

    Raises:
        InputError: the score arrays differ in shape or are not ``[N, C]``; labels do not fit.
    """
    reference = _scores("reference", reference_scores)
    candidate = _scores("candidate", candidate_scores)
    if reference.shape != candidate.shape:
        raise InputError(
            f"candidate scores | have shape {candidate.shape}, the reference's have {reference.shape}; "
            "expected the same (samples, classes).",
            hint="run both models on the same images, in the same order.",
        )
    samples, classes = reference.shape
    k = min(TOP_K, classes)
    reference_top = _top_k(reference, k)
    candidate_top = _top_k(candidate, k)
    agreement = float(np.mean(reference_top[:, 0] == candidate_top[:, 0]))
    overlap = np.mean([len(set(r) & set(c)) / k for r, c in zip(reference_top, candidate_top, strict=True)])
    accuracy = reference_accuracy = None
    if labels is not None:
        truth = np.asarray(labels)
        if truth.shape != (samples,) or truth.dtype.kind not in "iu" or truth.min() < 0 or truth.max() >= classes:
            raise InputError(
                f"labels | got {truth.shape[0] if truth.ndim == 1 else truth.shape} values of dtype {truth.dtype}; "
                f"expected {samples} class indices in [0, {classes}).",
                hint="give one integer class index per image, in the order of the score rows.",
            )
        accuracy = float(np.mean(candidate_top[:, 0] == truth))
        reference_accuracy = float(np.mean(reference_top[:, 0] == truth))
    return ClassificationAgreement(samples, agreement, float(overlap), accuracy, reference_accuracy)


@dataclass(frozen=True)
class DetectionAgreement:
    """How well a candidate detector's boxes match the reference's, the reference taken as truth.

    Attributes:
        images: number of images compared.
        reference_boxes: detections of the reference, all images together.
        candidate_boxes: detections of the candidate, all images together.
        precision: matched candidate boxes / candidate boxes (a match: same class, IoU ≥ ``iou``,
            each reference box matched once, higher scores first).
        recall: matched reference boxes / reference boxes.
        map50: mean over the reference's classes of COCO 101-point AP at IoU ``iou`` (0.5 by
            default). Classes only the candidate reports lower ``precision`` but not ``map50``.

    Edge cases: no boxes in either → 1.0 for all three (perfect agreement on nothing); reference
    boxes but no candidate boxes → 0.0 for all three; candidate boxes but no reference boxes →
    precision 0.0, recall 1.0 (nothing to miss), map50 0.0.
    """

    images: int
    reference_boxes: int
    candidate_boxes: int
    precision: float
    recall: float
    map50: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _cocoeval() -> tuple[Any, Any]:
    try:
        from pycocotools.coco import COCO
        from pycocotools.cocoeval import COCOeval
    except ImportError as exc:
        raise BackendUnavailableError(
            "detection agreement | needs pycocotools for mAP, a core dependency of deploykit that is missing.",
            hint="reinstall deploykit (pip install deploykit), or pip install 'pycocotools>=2.0.8'.",
        ) from exc
    return COCO, COCOeval


def _annotation(detection: Detection, image_id: int, annotation_id: int, name: str) -> dict[str, Any]:
    x1, y1, x2, y2 = (float(v) for v in detection.xyxy)
    if not all(np.isfinite([x1, y1, x2, y2])) or x2 < x1 or y2 < y1:
        raise InputError(
            f"{name} detection {detection.xyxy} in image {image_id} | is not a box; expected finite "
            "(x1, y1, x2, y2) with x2 ≥ x1 and y2 ≥ y1.",
            hint="pass the Detection objects a Detector returns.",
        )
    width, height = x2 - x1, y2 - y1
    return {
        "id": annotation_id,
        "image_id": image_id,
        "category_id": int(detection.class_id),
        "bbox": [x1, y1, width, height],
        "area": width * height,
        "iscrowd": 0,
        "score": float(detection.score),
    }


def detection_agreement(
    reference: Sequence[Sequence[Detection]], candidate: Sequence[Sequence[Detection]], *, iou: float = 0.5
) -> DetectionAgreement:
    """Compare a candidate detector's detections with the reference's on the same images.

    Args:
        reference: per image, the reference model's detections (taken as ground truth; scores unused).
        candidate: per image, the candidate model's detections (predictions, ranked by score).
        iou: the IoU at which a candidate box matches a reference box of the same class.

    Raises:
        InputError: the two lists cover different numbers of images, a box is malformed, or
            ``iou`` is not in (0, 1].
        BackendUnavailableError: pycocotools (a core dependency) is missing from the environment.
    """
    if len(reference) != len(candidate):
        raise InputError(
            f"candidate detections | cover {len(candidate)} images, the reference's cover {len(reference)}; "
            "expected the same images.",
            hint="run both detectors on the same images, in the same order.",
        )
    if not 0.0 < iou <= 1.0:
        raise InputError(f"iou {iou} | is not in (0, 1].", hint="0.5 is the usual mAP@0.5 threshold.")
    images = len(reference)
    ground_truth = [_annotation(d, i + 1, 0, "reference") for i, dets in enumerate(reference) for d in dets]
    predictions = [_annotation(d, i + 1, 0, "candidate") for i, dets in enumerate(candidate) for d in dets]
    if not ground_truth:
        empty = not predictions
        return DetectionAgreement(images, 0, len(predictions), float(empty), 1.0, float(empty))
    if not predictions:
        return DetectionAgreement(images, len(ground_truth), 0, 0.0, 0.0, 0.0)
    for number, annotation in enumerate(ground_truth + predictions, start=1):
        annotation["id"] = number
    COCO, COCOeval = _cocoeval()
    classes = sorted({a["category_id"] for a in ground_truth + predictions})
    with contextlib.redirect_stdout(io.StringIO()):  # pycocotools prints progress
        truth = COCO()
        truth.dataset = {
            "images": [{"id": i + 1} for i in range(images)],
            "annotations": ground_truth,
            "categories": [{"id": c} for c in classes],
        }
        truth.createIndex()
        predicted = truth.loadRes(predictions)
        evaluation = COCOeval(truth, predicted, "bbox")
        evaluation.params.iouThrs = np.array([iou])
        per_image = max(
            max(len(d) for d in candidate),
            max(len(d) for d in reference),
        )
        evaluation.params.maxDets = [max(per_image, 1)]
        evaluation.params.areaRng = [[0.0, float("inf")]]
        evaluation.params.areaRngLbl = ["all"]
        evaluation.evaluate()
        evaluation.accumulate()
    # precision[T, R, K, A, M]: one IoU, 101 recall points, K classes, one area, one maxDets
    precision_curve = evaluation.eval["precision"][0, :, :, 0, 0]
    with_truth = [k for k in range(precision_curve.shape[1]) if np.all(precision_curve[:, k] > -1)]
    map50 = float(np.mean(precision_curve[:, with_truth])) if with_truth else 0.0
    matched = sum(int(np.count_nonzero(result["dtMatches"][0])) for result in evaluation.evalImgs if result is not None)
    return DetectionAgreement(
        images, len(ground_truth), len(predictions), matched / len(predictions), matched / len(ground_truth), map50
    )
