"""Task metrics against small cases worked out by hand (each expected value is derived in a comment)."""

from __future__ import annotations

import numpy as np
import pytest

from deploykit.errors import InputError
from deploykit.tasks.classify import classification_agreement
from deploykit.tasks.detect import detection_agreement
from deploykit.vision.results import Detection


def box(class_id: int, xyxy: tuple[float, float, float, float], score: float = 1.0) -> Detection:
    return Detection(f"class_{class_id}", class_id, score, xyxy)


def test_classification_agreement_hand_computed():
    # 3 images, 6 classes. Reference top-1: 0, 1, 2. Candidate top-1: 0, 1, 5 → agreement 2/3.
    reference = np.array([
        [9, 8, 7, 6, 5, 0],   # top5 {0,1,2,3,4}
        [0, 9, 8, 7, 6, 5],   # top5 {1,2,3,4,5}
        [1, 2, 9, 0, 0, 0],   # top5 {2,1,0,3,4} (ties: lower index first)
    ], dtype=np.float32)  # fmt: skip
    candidate = np.array([
        [9, 8, 7, 6, 0, 5],   # top5 {0,1,2,3,5}: overlap 4
        [0, 9, 8, 7, 6, 5],   # same: overlap 5
        [1, 2, 8, 0, 0, 9],   # top5 {5,2,1,0,3}: overlap 4 ({0,1,2,3})
    ], dtype=np.float32)  # fmt: skip
    result = classification_agreement(reference, candidate, labels=[0, 2, 5])
    assert result.samples == 3
    assert result.top1_agreement == pytest.approx(2 / 3)
    assert result.top5_overlap == pytest.approx((4 + 5 + 4) / 15)
    assert result.top1_accuracy == pytest.approx(2 / 3)  # candidate right on rows 0 and 2
    assert result.reference_top1_accuracy == pytest.approx(1 / 3)  # reference right on row 0 only
    assert result.to_dict()["top1_agreement"] == pytest.approx(2 / 3)


def test_classification_without_labels_and_four_dimensional_scores():
    reference = np.array([[0.1, 0.7, 0.2], [0.6, 0.3, 0.1]]).reshape(2, 3, 1, 1)
    candidate = np.array([[0.2, 0.3, 0.5], [0.5, 0.4, 0.1]]).reshape(2, 3, 1, 1)
    result = classification_agreement(reference, candidate)
    # top-1 1 vs 2 (disagree), 0 vs 0 (agree); with 3 classes the top-k is all 3 classes → overlap 1
    assert result.top1_agreement == 0.5 and result.top5_overlap == 1.0
    assert result.top1_accuracy is None and result.reference_top1_accuracy is None


def test_classification_errors():
    with pytest.raises(InputError, match=r"candidate scores \| have shape \(2, 4\), the reference's have \(2, 3\)"):
        classification_agreement(np.zeros((2, 3)), np.zeros((2, 4)))
    with pytest.raises(InputError, match=r"reference scores \| have shape \(0, 3\).*at least one sample"):
        classification_agreement(np.zeros((0, 3)), np.zeros((0, 3)))
    with pytest.raises(InputError, match=r"labels \| got 1 values .* expected 2 class indices in \[0, 3\)"):
        classification_agreement(np.zeros((2, 3)), np.zeros((2, 3)), labels=[1])
    with pytest.raises(InputError, match=r"expected 2 class indices in \[0, 3\)"):
        classification_agreement(np.zeros((2, 3)), np.zeros((2, 3)), labels=[0, 3])


def test_identical_detections_agree_perfectly():
    reference = [[box(0, (0, 0, 10, 10)), box(1, (20, 20, 40, 40))], [box(0, (5, 5, 15, 25))]]
    result = detection_agreement(reference, reference)
    assert (result.images, result.reference_boxes, result.candidate_boxes) == (2, 3, 3)
    assert (result.precision, result.recall, result.map50) == (1.0, 1.0, 1.0)


def test_one_of_two_boxes_found_plus_a_lower_scored_false_positive():
    # One class, 2 reference boxes. Candidates by score: TP (0.9), FP (0.8, IoU 0 with both).
    # Precision/recall after each: (1, 0.5), (0.5, 0.5). Recall never passes 0.5, so the
    # 101-point AP has precision 1 at recall thresholds 0.00..0.50 (51 points), 0 after: 51/101.
    reference = [[box(0, (0, 0, 10, 10)), box(0, (50, 50, 60, 60))]]
    candidate = [[box(0, (1, 0, 11, 10), 0.9), box(0, (100, 100, 110, 110), 0.8)]]
    result = detection_agreement(reference, candidate)
    # IoU of the first pair: intersection 9×10 = 90, union 100 + 100 − 90 = 110 → 0.818 ≥ 0.5
    assert result.precision == 0.5 and result.recall == 0.5
    assert result.map50 == pytest.approx(51 / 101)


def test_false_positive_ranked_above_the_true_positive():
    # One reference box; candidates FP (0.9) then TP (0.8): precision 0 then 0.5 at recall 1.
    # The interpolated envelope is 0.5 at every recall threshold → AP 0.5.
    reference = [[box(3, (0, 0, 10, 10))]]
    candidate = [[box(3, (30, 30, 40, 40), 0.9), box(3, (0, 0, 10, 10), 0.8)]]
    result = detection_agreement(reference, candidate)
    assert result.map50 == pytest.approx(0.5)
    assert (result.precision, result.recall) == (0.5, 1.0)


def test_classes_iou_threshold_and_a_class_only_the_candidate_reports():
    # Class 0 found exactly (AP 1); class 1's candidate box has IoU 25/175 = 0.14 (AP 0);
    # class 7 exists only in the candidate: it lowers precision but not mAP. mAP = (1 + 0) / 2.
    reference = [[box(0, (0, 0, 10, 10)), box(1, (0, 0, 10, 10))]]
    candidate = [[box(0, (0, 0, 10, 10), 0.9), box(1, (5, 5, 15, 15), 0.9), box(7, (0, 0, 5, 5), 0.9)]]
    result = detection_agreement(reference, candidate)
    assert result.map50 == pytest.approx(0.5)
    assert result.precision == pytest.approx(1 / 3) and result.recall == pytest.approx(1 / 2)
    # at IoU 0.1 the class-1 box (IoU 0.14) matches too
    loose = detection_agreement(reference, candidate, iou=0.1)
    assert loose.map50 == pytest.approx(1.0) and loose.recall == 1.0


def test_a_box_of_the_wrong_class_does_not_match():
    result = detection_agreement([[box(0, (0, 0, 10, 10))]], [[box(1, (0, 0, 10, 10), 0.9)]])
    assert (result.precision, result.recall, result.map50) == (0.0, 0.0, 0.0)


def test_edge_cases_of_empty_detections():
    nothing = detection_agreement([[], []], [[], []])
    assert (nothing.precision, nothing.recall, nothing.map50) == (1.0, 1.0, 1.0)
    missed = detection_agreement([[box(0, (0, 0, 10, 10))], []], [[], []])
    assert (missed.precision, missed.recall, missed.map50) == (0.0, 0.0, 0.0)
    invented = detection_agreement([[]], [[box(0, (0, 0, 10, 10), 0.5)]])
    assert (invented.precision, invented.recall, invented.map50) == (0.0, 1.0, 0.0)


def test_detection_errors():
    with pytest.raises(InputError, match=r"candidate detections \| cover 1 images, the reference's cover 2"):
        detection_agreement([[], []], [[]])
    with pytest.raises(InputError, match=r"iou 0 \| is not in \(0, 1\]"):
        detection_agreement([[]], [[]], iou=0)
    with pytest.raises(InputError, match=r"reference detection \(10, 0, 0, 10\) in image 1 \| is not a box"):
        detection_agreement([[box(0, (10, 0, 0, 10))]], [[]])
