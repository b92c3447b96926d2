"""The ``detect`` task: does a candidate detector find the objects the reference finds?

The reference's detections are the ground truth, the candidate's are the predictions; precision,
recall and mAP@0.5 (COCO's 101-point interpolated AP, computed by pycocotools, averaged over the
classes the reference found). ``match_detections`` is the one matcher of boxes in deploykit:
verification, the pipeline bench, quantize's accuracy delta and the demo all pair boxes with it.
A model is a detector when ``deploykit.vision.decode`` knows the layout of its outputs.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from deploykit.errors import BackendUnavailableError, InputError
from deploykit.io import one_line
from deploykit.tasks.base import Outputs, ReducedModelEvidence, ResultTable, Task
from deploykit.tensors import TensorSpec
from deploykit.vision.results import Detection
from deploykit.vision.results import draw as draw_detections

APP_CONF = 0.25
RANKING_CONF = 0.001
PIPELINE_IOU = 0.9  # two backends' pipeline results are the same answer: same classes, boxes at IoU ≥ 0.9


@dataclass(frozen=True)
class DetectionMatch:
    """Boxes of one image paired one-to-one: ``pairs`` of (candidate index, reference index), the
    reference boxes no candidate matched (``missing``) and the candidate boxes left over (``extra``)."""

    pairs: tuple[tuple[int, int], ...]
    missing: tuple[int, ...]
    extra: tuple[int, ...]

    @property
    def same(self) -> bool:
        """Every box on both sides has its match."""
        return not self.missing and not self.extra


def _iou(a: tuple[float, ...], b: tuple[float, ...]) -> float:
    width = min(a[2], b[2]) - max(a[0], b[0])
    height = min(a[3], b[3]) - max(a[1], b[1])
    intersection = max(width, 0.0) * max(height, 0.0)
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - intersection
    return intersection / union if union > 0 else 0.0


def match_detections(
    reference: Sequence[Detection], candidate: Sequence[Detection], *, iou: float = 0.5
) -> DetectionMatch:
    """Pair one image's candidate boxes with the reference's, the way COCO evaluation does.

    Candidates are taken by descending score (ties in their order); each takes the unmatched
    reference box of the same class (id and label) with the highest IoU, if that IoU is ≥ ``iou``.
    """
    order = sorted(range(len(candidate)), key=lambda i: -float(candidate[i].score))
    taken: set[int] = set()
    pairs = []
    for index in order:
        box = candidate[index]
        best, best_iou = None, iou
        for ref_index, truth in enumerate(reference):
            if ref_index in taken or truth.class_id != box.class_id or truth.label != box.label:
                continue
            overlap = _iou(tuple(box.xyxy), tuple(truth.xyxy))
            if overlap >= best_iou:
                best, best_iou = ref_index, overlap
        if best is not None:
            taken.add(best)
            pairs.append((index, best))
    matched = {c for c, _ in pairs}
    return DetectionMatch(
        tuple(pairs),
        tuple(i for i in range(len(reference)) if i not in taken),
        tuple(i for i in range(len(candidate)) if i not in matched),
    )


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


@dataclass(frozen=True)
class DetectionDelta(DetectionAgreement):
    """A reduced detector's agreement with the float model, as ``DetectionAgreement`` measures it.

    Attributes:
        map_min_score: the lowest score of the reduced model's detections that ``map50`` ranks
            (precision and recall count only those above the Detector's threshold).
    """

    map_min_score: float = RANKING_CONF


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
    matched = sum(len(match_detections(r, c, iou=iou).pairs) for r, c in zip(reference, candidate, strict=True))
    return DetectionAgreement(
        images, len(ground_truth), len(predictions), matched / len(predictions), matched / len(ground_truth), map50
    )


class DetectTask(Task):
    """Detectors: mAP@0.5 of the candidate's detections against the reference's, at least ``Thresholds.min_map``."""

    name = "detect"
    metric = "mAP@0.5"
    threshold_field = "min_map"
    pipeline = "deploykit.vision.pipelines:Detector"
    predict_settings = ("conf", "iou", "agnostic")
    call_parameters = (("conf", float), ("iou", float))
    json_key = "detections"
    drawing = "boxes"
    quantize_keeps_head_float = True
    quantize_budget_needs_images = True

    def __init__(self, layout: Any, labels: Sequence[str] | None) -> None:
        self.layout, self.labels = layout, labels

    @classmethod
    def recognise(
        cls, outputs: Mapping[str, TensorSpec], metadata: Mapping[str, str], stated: str | None
    ) -> Task | None:
        from deploykit.metadata import read_metadata
        from deploykit.vision.decode import find_layout

        layout = find_layout(outputs, metadata)
        if layout is None:
            return None
        labels = read_metadata(metadata).labels
        return cls(layout, list(labels) if labels is not None else None)

    def decode(self, outputs: Outputs, feeds: Outputs, *, reference: bool) -> list[list[Detection]]:
        from deploykit.vision.decode import decode_detections

        image = next(iter(feeds.values()))
        size = (int(image.shape[-2]), int(image.shape[-1]))
        # the reference's boxes at the app's threshold are the ground truth; the candidate's are ranked
        # down to score 0.001, as COCO evaluates, so a box just under the threshold is not a miss
        conf = APP_CONF if reference else RANKING_CONF
        return decode_detections(self.layout, outputs, size, labels=self.labels, conf=conf)

    def agreement(self, reference: Sequence[Any], candidate: Sequence[Any]) -> tuple[float, dict[str, Any]]:
        # each input set holds a batch of images: one list of boxes per image, all sets together
        expected = [image for batch in reference for image in batch]
        found = [image for batch in candidate for image in batch]
        measured = detection_agreement(expected, found)
        return measured.map50, measured.to_dict()

    @classmethod
    def reduced_delta(cls, evidence: ReducedModelEvidence) -> tuple[Any, float | None, list[str]]:
        """On images: the reduced model's detections against the float model's, both through the
        Detector; drop = 1 − mAP@0.5. On arrays: the outputs judged as verification does.

        The float model's detections at the Detector's confidence threshold are the truth. Precision
        and recall compare the reduced model at that same threshold (what an app sees); mAP ranks all
        its detections down to ``RANKING_CONF``, as mAP is defined, so a box that scores 0.24 instead
        of 0.26 lowers the AP a little instead of counting as missed.
        """
        if not evidence.images:
            return super().reduced_delta(evidence)
        from deploykit.vision.pipelines import Detector

        images = list(evidence.images)
        backend, options = evidence.judge_backend, dict(evidence.judge_options)
        with (
            Detector(evidence.float_model, backend, **options) as reference,
            Detector(evidence.reduced_model, backend, **options) as reduced,
        ):
            truth = reference.batch(images)
            at_threshold = detection_agreement(truth, reduced.batch(images))
            ranked = detection_agreement(truth, reduced.batch(images, conf=RANKING_CONF))
        delta = DetectionDelta(**{**asdict(at_threshold), "map50": ranked.map50}, map_min_score=RANKING_CONF)
        return delta, round(1.0 - delta.map50, 9), []

    @classmethod
    def results_agree(cls, ours: Sequence[Any], theirs: Sequence[Any]) -> bool:
        return match_detections(theirs, ours, iou=PIPELINE_IOU).same

    @classmethod
    def pipeline_options(cls, settings: Mapping[str, Any]) -> dict[str, Any]:
        given = {key: settings[key] for key in cls.predict_settings if key in settings}
        return {"labels": settings.get("labels"), **given}

    @classmethod
    def table(cls, results: Sequence[Any], source: str, settings: Mapping[str, Any]) -> ResultTable:
        rows = tuple((one_line(d.label), f"{d.score:.3f}", *(f"{v:.1f}" for v in d.xyxy)) for d in results)
        return ResultTable(f"{len(results)} detections in {source}", ("label", "score", "x1", "y1", "x2", "y2"), rows)

    @classmethod
    def draw(cls, image: np.ndarray, results: Sequence[Any]) -> np.ndarray:
        return draw_detections(image, results)
