"""The finalists' rounds planned from measured costs: a slow f32 reference and a fast INT8 candidate
on a busy device both reach the rule's minimum evidence when the time allows it at all, a fast
round is not as long as a slow one when time is short, and a budget that cannot pay for the
minimum ends inconclusive in words. Synthetic call times (the rule is what is under test); the
blocks are counted by bench's own ``blocks_of``."""

from __future__ import annotations

import numpy as np

from deploykit.bench.measure import blocks_of
from deploykit.optimize.ranking import MIN_BLOCKS, MIN_ROUNDS, RankEntry, rank
from deploykit.optimize.schedule import (
    MAX_ROUNDS,
    MIN_CALLS,
    ROUND_DURATION_S,
    FinalistCost,
    minimum_evidence_s,
    plan_round,
)

# measured under one busy thread on a 2-core CPU: ONNX Runtime f32 at 72 ms a call, OpenVINO INT8 at
# 4.8 ms; starting a worker (process, import, load) costs what the screening round cost
SLOW = FinalistCost("onnxruntime f32", call_s=0.072, overhead_s=0.55, start_s=8.0, rounds=1)
FAST = FinalistCost("openvino int8", call_s=0.0048, overhead_s=0.27, start_s=6.0, rounds=1)


def _run_rounds(costs: list[FinalistCost], budget_s: float, rng: np.random.Generator) -> dict[str, list[list[float]]]:
    """Plays the rounds the plan allows within ``budget_s``: each finalist's synthetic calls per round,
    cut into blocks by bench's ``blocks_of``; returns each one's blocks (p50 ms) per round, the
    screening round first."""
    rounds: dict[str, list[list[float]]] = {}
    for cost in costs:
        calls = rng.normal(cost.call_s, cost.call_s * 0.05, size=MIN_CALLS)
        rounds[cost.label] = [[b.p50_ms for b in blocks_of((calls * 1e9).astype(np.int64), 1)]]
    spent = 0.0
    while True:
        plan = plan_round(costs, budget_s - spent)
        if plan is None:
            return rounds
        spent += plan.cost_s
        assert spent <= budget_s + 1e-9
        costs = [
            FinalistCost(c.label, c.call_s, c.overhead_s, 0.0, c.rounds + 1)  # started: no start cost again
            for c in costs
        ]
        for cost in costs:
            count = max(MIN_CALLS, int(plan.duration_s / cost.call_s))
            calls = rng.normal(cost.call_s, cost.call_s * 0.05, size=count)
            rounds[cost.label].append([b.p50_ms for b in blocks_of((calls * 1e9).astype(np.int64), 1)])
        if min(c.rounds for c in costs) >= MAX_ROUNDS:
            return rounds


def test_a_slow_reference_and_a_fast_candidate_both_reach_the_minimum_on_a_tight_budget():
    """30 s left after screening: the minimum for both (about 20 s here) fits, so both get at least
    5 rounds of at least 3 blocks, and the decision is the rule's, not an inconclusive one."""
    budget = 30.0
    assert minimum_evidence_s([SLOW, FAST]) <= budget
    rounds = _run_rounds([SLOW, FAST], budget, np.random.default_rng(0))
    for label, per_round in rounds.items():
        assert len(per_round) >= MIN_ROUNDS, (label, len(per_round))
        assert min(len(blocks) for blocks in per_round) >= MIN_BLOCKS, label
    ranking = rank([RankEntry(SLOW.label, rounds[SLOW.label]), RankEntry(FAST.label, rounds[FAST.label], "int8", True)])
    assert ranking.decision == "faster" and ranking.chosen == FAST.label
    for interval in ranking.intervals.values():
        assert interval.sufficient and interval.rounds >= MIN_ROUNDS and interval.fewest_blocks >= MIN_BLOCKS


def test_a_fast_rounds_cost_is_sized_by_its_own_calls_when_time_is_short():
    """With little time the round's timed part shrinks to the fewest calls the rule accepts: the fast
    candidate's round then costs a fraction of the slow one's, instead of as much as 10 slow blocks."""
    plan = plan_round([SLOW, FAST], 25.0)
    assert plan is not None and plan.duration_s < ROUND_DURATION_S
    assert FAST.round_s(plan.duration_s) < SLOW.round_s(plan.duration_s) / 2
    spacious = plan_round([SLOW, FAST], 600.0)
    assert spacious is not None and spacious.duration_s == ROUND_DURATION_S  # never longer: more rounds first


def test_a_budget_that_cannot_pay_for_the_minimum_is_inconclusive_in_words():
    """Less time than both minimums need: no round is planned, and the ranking of what there is says
    inconclusive with the evidence each side had, never "faster"."""
    budget = minimum_evidence_s([SLOW, FAST]) * 0.5
    assert plan_round([SLOW, FAST], budget) is None
    rounds = _run_rounds([SLOW, FAST], budget, np.random.default_rng(1))
    assert all(len(per_round) < MIN_ROUNDS for per_round in rounds.values())
    ranking = rank([RankEntry(SLOW.label, rounds[SLOW.label]), RankEntry(FAST.label, rounds[FAST.label], "int8", True)])
    assert ranking.decision == "inconclusive" and ranking.chosen == SLOW.label
    assert "insufficient evidence" in ranking.reason and f"the rule needs {MIN_ROUNDS} rounds" in ranking.reason
    assert "1 round, 3 blocks" in ranking.reason


def test_the_allowance_past_the_budget_pays_only_for_the_minimum():
    """Past the time budget (screening ran into it) the allowance still pays for the minimum; once both
    have it, no round runs outside the budget."""
    plan = plan_round([SLOW, FAST], -5.0, 40.0)
    assert plan is not None and plan.duration_s == 0.0
    done = [FinalistCost(c.label, c.call_s, c.overhead_s, 0.0, MIN_ROUNDS) for c in (SLOW, FAST)]
    assert minimum_evidence_s(done) == 0.0
    assert plan_round(done, -5.0, 40.0) is None
    assert plan_round(done, 10.0) is not None
