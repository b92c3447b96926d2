"""The ``classify`` task: does a candidate classifier pick the class the reference picks?

Top-1 agreement, top-5 overlap, and top-1 accuracy when labels are given, comparing a candidate's
scores with a reference run on the same images (usually the f32 model), so no labelled data set
is needed. A model is a classifier when its metadata says so, or when its one output is
(batch, classes) with at least ``MIN_CLASSES`` classes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from deploykit.errors import InputError
from deploykit.io import one_line
from deploykit.tasks.base import Outputs, ReducedModelEvidence, ResultTable, Task
from deploykit.tensors import TensorSpec

MIN_CLASSES = 5
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


def class_indices(classes: Sequence[str | None], labels: Sequence[str]) -> tuple[list[int] | None, str | None]:
    """True classes from the held-out images' folder names, matched to the model's labels
    (exactly, ignoring case and '_' versus ' ', or as an integer index); None and why when any is unknown."""
    if not classes or any(name is None for name in classes):
        return None, "top-1 accuracy not measured: the held-out images are not in folder/<class>/ sub-folders"
    from deploykit.labels import class_index

    found = []
    for name in classes:
        assert name is not None
        index = class_index(name, labels)
        if index is None:
            return None, f"top-1 accuracy not measured: class folder '{name}' is not one of the model's labels"
        found.append(index)
    return found, None


def _score_rows(outputs: Sequence[Outputs]) -> np.ndarray:
    first = next(iter(outputs[0]))
    return np.concatenate([o[first].reshape(o[first].shape[0], -1) for o in outputs])


class ClassifyTask(Task):
    """Classifiers: top-1 agreement with the reference, at least ``Thresholds.min_top1_agreement``."""

    name = "classify"
    metric = "top-1 agreement"
    threshold_field = "min_top1_agreement"
    pipeline = "deploykit.vision.pipelines:Classifier"
    predict_settings = ("top_k", "imagenet")
    call_parameters = (("top_k", int),)
    json_key = "classes"

    @classmethod
    def recognise(
        cls, outputs: Mapping[str, TensorSpec], metadata: Mapping[str, str], stated: str | None
    ) -> Task | None:
        if len(outputs) != 1:
            return None
        shape = next(iter(outputs.values())).shape
        classes = shape[-1] if shape else None
        if (
            shape is not None
            and len(shape) == 2
            and (stated == cls.name or (isinstance(classes, int) and classes >= MIN_CLASSES))
        ):
            return cls()
        return None

    def decode(self, outputs: Outputs, feeds: Outputs, *, reference: bool) -> np.ndarray:
        scores = next(iter(outputs.values()))
        return scores.reshape(scores.shape[0], -1)

    def agreement(self, reference: Sequence[Any], candidate: Sequence[Any]) -> tuple[float, dict[str, Any]]:
        measured = classification_agreement(np.concatenate(reference), np.concatenate(candidate))
        return measured.top1_agreement, measured.to_dict()

    @classmethod
    def reduced_delta(cls, evidence: ReducedModelEvidence) -> tuple[ClassificationAgreement, float, list[str]]:
        """Top-1 agreement with the float model; with class folders matching the labels the drop is
        the fall in top-1 accuracy, else 1 − top-1 agreement."""
        truth, note = class_indices(evidence.image_classes, evidence.labels)
        reference, reduced = _score_rows(evidence.reference), _score_rows(evidence.reduced_outputs())
        agreement = classification_agreement(reference, reduced, truth)
        if agreement.top1_accuracy is not None and agreement.reference_top1_accuracy is not None:
            drop = agreement.reference_top1_accuracy - agreement.top1_accuracy
        else:
            drop = 1.0 - agreement.top1_agreement
        return agreement, round(drop, 9), [note] if note else []

    @classmethod
    def results_agree(cls, ours: Sequence[Any], theirs: Sequence[Any]) -> bool:
        return bool(ours[0].class_id == theirs[0].class_id)

    @classmethod
    def pipeline_options(cls, settings: Mapping[str, Any]) -> dict[str, Any]:
        from deploykit.vision.preprocess import IMAGENET_MEAN, IMAGENET_STD, PreprocessOverrides

        imagenet = settings.get("imagenet", False)
        preprocess = PreprocessOverrides(mean=IMAGENET_MEAN, std=IMAGENET_STD) if imagenet else PreprocessOverrides()
        return {"labels": settings.get("labels"), "preprocess": preprocess.to_dict()}

    @classmethod
    def table(cls, results: Sequence[Any], source: str, settings: Mapping[str, Any]) -> ResultTable:
        rows = tuple(
            (str(rank), one_line(c.label), str(c.class_id), f"{c.score:.4f}") for rank, c in enumerate(results, start=1)
        )
        top_k = settings.get("top_k", len(results))
        return ResultTable(f"top {top_k} for {source}", ("rank", "label", "class", "probability"), rows)
