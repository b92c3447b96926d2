"""Accuracy evidence: Wilson's interval for top-1 agreement, a bootstrap over images for other
metrics, and the images an accuracy budget needs before it can be proven."""

from __future__ import annotations

import pytest

from deploykit.optimize.accuracy import bootstrap_interval, budget_note, min_images, share_interval, wilson


def test_wilson_matches_the_textbook_values():
    low, high = wilson(8, 10)
    assert low == pytest.approx(0.4902, abs=1e-3) and high == pytest.approx(0.9433, abs=1e-3)
    low, high = wilson(10, 10)
    assert high == pytest.approx(1.0) and low == pytest.approx(10 / (10 + 1.959964**2), abs=1e-4)


def test_a_perfect_agreement_on_few_images_proves_little():
    few = share_interval(1.0, 6)
    assert few.delta == 0.0 and few.low == 0.0 and few.high > 0.3 and few.images == 6 and few.method == "wilson"
    assert share_interval(1.0, 381).high <= 0.01 < share_interval(1.0, 380).high


def test_the_minimum_images_for_a_budget_and_the_note_said_up_front():
    assert min_images(0.01) == 381 and min_images(0.04) == 93 and min_images(0.0) is None
    note = budget_note(10, 0.01)
    assert note is not None and "10 held-out image(s) cannot prove" in note and "at least 381" in note
    assert budget_note(400, 0.01) is None and budget_note(3, 0.0) is None


def test_a_bootstrap_over_images_widens_with_disagreement():
    def share(expected, found):
        return sum(e == f for e, f in zip(expected, found, strict=True)) / len(expected)

    same = bootstrap_interval(share, list(range(20)), list(range(20)))
    mixed = bootstrap_interval(share, list(range(20)), [i if i % 4 else -1 for i in range(20)])
    assert same.delta == 0.0 and same.low == same.high == 0.0 and same.images == 20
    assert mixed.delta == pytest.approx(0.25) and mixed.low < 0.25 < mixed.high
    assert mixed.method == "bootstrap over images"
