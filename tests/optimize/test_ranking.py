"""The ranking rule on synthetic samples: intervals, ties to the simpler setup, the rule said."""

from __future__ import annotations

import numpy as np
import pytest

from deploykit.optimize.ranking import (
    DECISION_RULE,
    MIN_BLOCKS,
    MIN_ROUNDS,
    Interval,
    RankEntry,
    Ranking,
    bootstrap_interval,
    rank,
)


def _rounds(rng: np.random.Generator, center: float, spread: float, rounds: int = 5, blocks: int = 8) -> list:
    return [list(rng.normal(center, spread, blocks)) for _ in range(rounds)]


def test_two_draws_of_one_distribution_tie_and_the_simpler_setup_wins():
    rng = np.random.default_rng(7)
    entries = [
        RankEntry("openvino bf16 t2", _rounds(rng, 10.0, 0.5), precision="bf16", threads=2),
        RankEntry("openvino int8 t2", _rounds(rng, 10.0, 0.5), precision="int8", quantized=True, threads=2),
        RankEntry("ort f32 t2", _rounds(rng, 10.0, 0.5), precision="f32", threads=2),
        RankEntry("ort f32 t1", _rounds(rng, 10.0, 0.5), precision="f32", threads=1),
    ]
    ranking = rank(entries, unit="ms")
    assert set(ranking.tied) == {e.label for e in entries}
    assert ranking.chosen == "ort f32 t1"
    assert "tie goes to the simpler setup" in ranking.reason or "none of them simpler" in ranking.reason
    assert ranking.rule == DECISION_RULE and "intervals" in ranking.rule


def test_well_separated_the_faster_wins_whatever_its_precision():
    rng = np.random.default_rng(1)
    ranking = rank(
        [
            RankEntry("ort f32", _rounds(rng, 20.0, 0.3), precision="f32"),
            RankEntry("ov int8", _rounds(rng, 8.0, 0.3), precision="int8", quantized=True),
        ],
        unit="ms",
    )
    assert ranking.chosen == "ov int8" and ranking.tied == ("ov int8",)
    assert ranking.reason.startswith("faster: its interval")
    assert ranking.intervals["ov int8"].separated_from(ranking.intervals["ort f32"])


def test_throughput_is_higher_is_better():
    rng = np.random.default_rng(2)
    ranking = rank(
        [RankEntry("b1", _rounds(rng, 100.0, 1.0), batch=1), RankEntry("b8", _rounds(rng, 300.0, 1.0), batch=8)],
        higher_is_better=True,
    )
    assert ranking.chosen == "b8" and ranking.order == ("b8", "b1")


def test_a_tie_on_precision_ties_then_fewer_threads():
    rng = np.random.default_rng(3)
    ranking = rank([RankEntry("t2", _rounds(rng, 5.0, 0.4), threads=2),
                    RankEntry("t1", _rounds(rng, 5.0, 0.4), threads=1)])  # fmt: skip
    assert ranking.chosen == "t1" and ("fewer threads" in ranking.reason or ranking.leader == "t1")


def test_the_bench_bug_a_0_05_percent_difference_is_a_tie_that_keeps_f32():
    """make demo recommended OpenVINO bf16 (p90 3.972 ms) over ORT f32 (3.974 ms): noise, not speed."""
    rng = np.random.default_rng(4)
    ranking = rank([RankEntry("openvino:CPU bf16", _rounds(rng, 3.972, 0.05, blocks=10), precision="bf16"),
                    RankEntry("onnxruntime:cpu f32", _rounds(rng, 3.974, 0.05, blocks=10), precision="f32")])  # fmt: skip
    assert ranking.chosen == "onnxruntime:cpu f32" and ranking.decision == "tied"


def test_interval_contains_the_estimate_and_narrows_with_more_rounds():
    rng = np.random.default_rng(5)
    few = bootstrap_interval(_rounds(rng, 10.0, 1.0, rounds=5))
    many = bootstrap_interval(_rounds(rng, 10.0, 1.0, rounds=20))
    assert few.low is not None and few.high is not None and many.low is not None and many.high is not None
    assert few.low <= few.estimate <= few.high and many.low <= many.estimate <= many.high
    assert many.high - many.low < few.high - few.low
    assert bootstrap_interval([[1.0, 2.0], [3.0]]).rounds == 2  # rounds of unequal length


def test_round_trip_and_bad_input():
    rng = np.random.default_rng(6)
    ranking = rank([RankEntry("a", _rounds(rng, 1.0, 0.1)), RankEntry("b", _rounds(rng, 2.0, 0.1))])
    assert Ranking.from_dict(ranking.to_dict()) == ranking
    interval = ranking.intervals["a"]
    assert Interval.from_dict(interval.to_dict()) == interval
    with pytest.raises(ValueError):
        rank([])
    with pytest.raises(ValueError):
        bootstrap_interval([[]])


def test_one_sample_each_is_never_faster_and_never_an_interval():
    """A single timed sample per side cannot support a bootstrap: no interval (not a zero-width
    one), and however far apart the two values are, the decision is inconclusive and simpler wins."""
    ranking = rank([RankEntry("ov int8", [[1.0]], precision="int8", quantized=True, calls=1),
                    RankEntry("ort f32", [[100.0]], precision="f32", calls=1)], unit="ms")  # fmt: skip
    point = ranking.intervals["ov int8"]
    assert point.low is None and point.high is None and not point.sufficient
    assert ranking.decision == "inconclusive" and ranking.chosen == "ort f32" and ranking.leader == "ov int8"
    assert "insufficient evidence" in ranking.reason and "1 round, 1 blocks, 1 calls" in ranking.reason
    assert "insufficient evidence" in point.describe("ms") and point.bounds() == "insufficient evidence"
    assert not point.separated_from(ranking.intervals["ort f32"])


@pytest.mark.parametrize(("rounds", "blocks"), [(MIN_ROUNDS - 1, 8), (MIN_ROUNDS, MIN_BLOCKS - 1), (1, 60)])
def test_below_the_rule_separated_distributions_are_still_inconclusive(rounds, blocks):
    """Fewer rounds, or rounds of fewer blocks, than the rule asks: no claim, even for a 10x gap."""
    rng = np.random.default_rng(11)
    ranking = rank([RankEntry("fast int8", _rounds(rng, 1.0, 0.05, rounds, blocks), precision="int8"),
                    RankEntry("slow f32", _rounds(rng, 10.0, 0.5, rounds, blocks), precision="f32")])  # fmt: skip
    assert ranking.decision == "inconclusive" and ranking.chosen == "slow f32"
    assert all(not i.sufficient for i in ranking.intervals.values())


def test_separated_distributions_with_the_rules_evidence_are_faster_and_say_their_evidence():
    rng = np.random.default_rng(12)
    entries = [RankEntry("fast int8", _rounds(rng, 1.0, 0.05, MIN_ROUNDS, MIN_BLOCKS), precision="int8", calls=45),
               RankEntry("slow f32", _rounds(rng, 10.0, 0.5, MIN_ROUNDS, MIN_BLOCKS), precision="f32", calls=45)]  # fmt: skip
    ranking = rank(entries, unit="ms")
    assert ranking.decision == "faster" and ranking.chosen == "fast int8"
    assert "5 rounds, 15 blocks, 45 calls" in ranking.reason
    data = ranking.to_dict()["intervals"]["fast int8"]
    assert data["sufficient"] is True and data["rounds"] == MIN_ROUNDS and data["fewest_blocks"] == MIN_BLOCKS
    assert data["calls"] == 45 and data["low"] < data["high"]
    assert str(MIN_ROUNDS) in DECISION_RULE and "inconclusive" in DECISION_RULE
