"""The element-wise rule can fail: a reference too small for atol is judged by a tolerance scaled to it."""

from __future__ import annotations

import numpy as np
import pytest

from deploykit.verify.metrics import ATOL_SHARE_OF_PEAK, SCALED_RULE, OutputMetrics, compare_array, thresholds_for
from deploykit.verify.verdict import OracleInfo, judge


def _tiny_logits() -> np.ndarray:
    """Logits of a random-initialised classifier head: 1000 values peaking near 1e-9 (atol is 1e-4)."""
    values = np.random.default_rng(3).normal(0.0, 4e-10, (1, 1000))
    return values.astype(np.float32)


WRONG = {
    "zeros": lambda r: np.zeros_like(r),
    "negated": lambda r: -r,
    "shuffled": lambda r: np.random.default_rng(1).permutation(r.ravel()).reshape(r.shape),
    "reversed": lambda r: r[:, ::-1].copy(),
}


@pytest.mark.parametrize("wrong", WRONG)
def test_no_wrong_candidate_passes_against_a_tiny_reference(wrong):
    reference = _tiny_logits()
    metrics = compare_array("logits", WRONG[wrong](reference), reference, thresholds_for("f32"), reduced=False)
    assert not metrics.passed, metrics.describe()
    assert metrics.rule == SCALED_RULE
    verdict = judge("ort", [metrics], OracleInfo("pytorch", True), thresholds_for("f32"), precision="f32")
    assert verdict.status == "fail"
    assert verdict.rule == SCALED_RULE
    assert "too small for atol" in verdict.reason


def test_the_right_answer_still_passes_against_a_tiny_reference_and_says_which_rule_judged():
    reference = _tiny_logits()
    noise = np.random.default_rng(2).normal(0.0, 1e-6, reference.shape)
    candidate = (reference * (1 + noise)).astype(np.float32)
    metrics = compare_array("logits", candidate, reference, thresholds_for("f32"), reduced=False)
    assert metrics.passed
    peak = float(np.abs(reference).max())
    assert metrics.atol_scaled == pytest.approx(ATOL_SHARE_OF_PEAK * peak)
    verdict = judge("ort", [metrics], OracleInfo("pytorch", True), thresholds_for("f32"), precision="f32")
    assert verdict.status == "pass"
    assert verdict.rule == SCALED_RULE
    assert f"peaks at {peak:.3g}" in verdict.reason and "atol was scaled" in verdict.reason
    assert OutputMetrics.from_dict(metrics.to_dict()) == metrics


def test_a_reference_of_ordinary_scale_keeps_the_given_atol():
    reference = np.linspace(-3, 3, 100, dtype=np.float32)
    metrics = compare_array("y", reference + np.float32(5e-5), reference, thresholds_for("f32"), reduced=False)
    assert metrics.passed and metrics.atol_scaled is None and metrics.rule == "element-wise"


def test_a_reference_below_the_smallest_normal_number_is_degenerate():
    reference = np.array([1e-40, -3e-41, 2e-40], np.float32)  # float32 subnormals
    metrics = compare_array("y", np.zeros_like(reference), reference, thresholds_for("f32"), reduced=False)
    assert metrics.degenerate and "smallest normal number" in metrics.degenerate
    verdict = judge("ort", [metrics], OracleInfo("pytorch", True), thresholds_for("f32"), precision="f32")
    assert verdict.status in ("degenerate", "fail")
