"""The finalists' rounds planned from measured costs: a slow f32 reference and a fast INT8 candidate
on a busy device both reach the rule's minimum evidence when the time allows it at all, a fast
round is not as long as a slow one when time is short, a budget that cannot pay for the minimum
ends inconclusive in words, and a leader and rival far apart but still overlapping after the
minimum get the time left to themselves until they separate. Synthetic call times (the rule is
what is under test); the blocks are counted by bench's own ``blocks_of``."""

from __future__ import annotations

import numpy as np

from deploykit.bench.measure import blocks_of
from deploykit.optimize.ranking import MIN_BLOCKS, MIN_ROUNDS, RankEntry, bootstrap_interval, rank
from deploykit.optimize.schedule import (
    CLOSE_GAP,
    MAX_ROUNDS,
    MIN_CALLS,
    ROUND_DURATION_S,
    FinalistCost,
    focus,
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


# After the minimum, as one idle YOLOv4-tiny search measured them (block p50s in ms per round): the
# INT8 candidate 4.47 ms with two rounds disturbed by another process, bf16 8.7 ms spread from 6.5 to
# 11.5 ms, and the ONNX Runtime f32 reference at 29.7 ms. Five rounds each leave the two overlapping.
MEASURED = {
    "openvino int8": [
        [4.41, 4.38, 4.45],
        [4.47, 4.40, 4.52, 4.39],
        [7.6, 7.3, 7.9],
        [4.43, 4.50, 4.46],
        [7.2, 7.5, 6.9],
    ],
    "openvino bf16": [[8.7, 8.9, 8.6], [6.5, 6.4, 6.6], [11.4, 11.6, 11.2], [8.8, 8.6, 8.7], [6.6, 6.5, 6.7]],
    "onnxruntime f32": [
        [29.7, 30.1, 29.5],
        [29.9, 29.6, 29.8],
        [31.0, 30.6, 30.8],
        [29.4, 29.7, 29.6],
        [30.2, 29.9, 30.0],
    ],
}
ENTRIES = {"openvino int8": ("int8", True), "openvino bf16": ("bf16", False), "onnxruntime f32": ("f32", False)}
# resident workers already running: a round costs its warm-up, settle and exchange besides the calls
COSTS = {
    "openvino int8": FinalistCost("openvino int8", call_s=0.0045, overhead_s=0.3, start_s=0.0, rounds=MIN_ROUNDS),
    "openvino bf16": FinalistCost("openvino bf16", call_s=0.0087, overhead_s=0.3, start_s=0.0, rounds=MIN_ROUNDS),
    "onnxruntime f32": FinalistCost("onnxruntime f32", call_s=0.0297, overhead_s=0.45, start_s=0.0, rounds=MIN_ROUNDS),
}


def _round_level(label: str, rng: np.random.Generator) -> float:
    """One more round's typical call in seconds, with the noise the measured rounds show: the INT8
    candidate disturbed in about a third of its rounds, bf16 spread over its whole range."""
    if label == "openvino int8":
        return 0.00445 * (rng.uniform(1.5, 1.75) if rng.random() < 0.3 else 1.0)
    if label == "openvino bf16":
        return rng.uniform(0.0065, 0.0115)
    return rng.uniform(0.0294, 0.0310)


def _play_close_finalists(budget_s: float, rng: np.random.Generator) -> tuple[dict[str, list[list[float]]], float]:
    """The search's rounds after the minimum: plan (with the intervals so far), measure who the plan
    names, stop a finalist whose interval separates from the leader's (as the search does), until
    one is left or no round is planned; returns every finalist's rounds and the time spent."""
    rounds = {label: [list(blocks) for blocks in measured] for label, measured in MEASURED.items()}
    costs = dict(COSTS)
    alive = set(costs)
    spent = 0.0
    while len(alive) > 1:
        intervals = {label: bootstrap_interval(rounds[label]) for label in alive}
        plan = plan_round([costs[label] for label in alive], budget_s - spent, intervals=intervals)
        if plan is None:
            break
        spent += plan.cost_s
        assert spent <= budget_s + 1e-9  # rounds past the minimum never use an allowance
        for label in plan.labels:
            cost = costs[label]
            level = _round_level(label, rng)
            calls = rng.normal(level, level * 0.03, size=max(MIN_CALLS, int(plan.duration_s / cost.call_s)))
            rounds[label].append([b.p50_ms for b in blocks_of((calls * 1e9).astype(np.int64), 1)])
            costs[label] = FinalistCost(label, cost.call_s, cost.overhead_s, 0.0, cost.rounds + 1)
        intervals = {label: bootstrap_interval(rounds[label]) for label in alive}
        leader = min(alive, key=lambda label: intervals[label].estimate)
        alive = {label for label in alive if not intervals[label].separated_from(intervals[leader])}
    return rounds, spent


def _ranking(rounds: dict[str, list[list[float]]]):
    return rank([RankEntry(label, rounds[label], *ENTRIES[label]) for label in rounds])


def test_measured_finalists_far_apart_overlap_after_the_minimum():
    """The premise: with the minimum evidence on every side, the INT8 and bf16 intervals overlap
    although one estimate is almost twice the other, so the rule can only say "tied" (and the tie
    goes to bf16, the simpler setup)."""
    ranking = _ranking(MEASURED)
    int8, bf16 = ranking.intervals["openvino int8"], ranking.intervals["openvino bf16"]
    assert int8.sufficient and bf16.sufficient and not int8.separated_from(bf16)
    assert bf16.estimate / int8.estimate >= CLOSE_GAP
    assert ranking.decision == "tied" and ranking.chosen == "openvino bf16"


def test_more_rounds_go_to_the_leader_and_its_nearest_rival_alone():
    """After the minimum the next round is planned for exactly the INT8 leader and the bf16 rival
    (the reference has its evidence and is left out), and their rounds may go past ``MAX_ROUNDS``."""
    intervals = {label: bootstrap_interval(rounds) for label, rounds in MEASURED.items()}
    assert focus(intervals) == ("openvino int8", "openvino bf16")
    plan = plan_round(list(COSTS.values()), 30.0, intervals=intervals)
    assert plan is not None and plan.focused
    assert plan.labels == ("openvino int8", "openvino bf16")
    assert plan.cost_s == sum(COSTS[label].round_s(plan.duration_s) for label in plan.labels)
    late = [FinalistCost(c.label, c.call_s, c.overhead_s, 0.0, MAX_ROUNDS) for c in COSTS.values()]
    assert plan_round(late, 30.0) is None  # without the intervals: no round past MAX_ROUNDS
    assert plan_round(late, 30.0, intervals=intervals) is not None


def test_close_finalists_separate_within_the_budget_and_the_rule_says_faster():
    """30 s left after the minimum: the focused rounds separate INT8 from bf16 without passing the
    budget, every side keeps at least the rule's evidence, and the decision becomes "faster" for
    INT8 (the rule unchanged: its interval separates from every other)."""
    rounds, spent = _play_close_finalists(30.0, np.random.default_rng(3))
    assert spent <= 30.0
    assert len(rounds["openvino int8"]) > MIN_ROUNDS and len(rounds["openvino bf16"]) > MIN_ROUNDS
    assert len(rounds["onnxruntime f32"]) == MIN_ROUNDS  # the reference kept its evidence, no more rounds
    ranking = _ranking(rounds)
    assert all(i.sufficient for i in ranking.intervals.values())
    assert ranking.decision == "faster" and ranking.chosen == "openvino int8", ranking.reason


def test_no_focus_without_the_minimum_or_when_the_estimates_are_close():
    """Focus needs the rule's evidence on both sides and a gap of ``CLOSE_GAP``: one side short of
    the minimum, or estimates 10 % apart, plan a round for every finalist as before; and past the
    budget no focused round runs on the allowance."""
    intervals = {label: bootstrap_interval(rounds) for label, rounds in MEASURED.items()}
    short = {**intervals, "openvino bf16": bootstrap_interval(MEASURED["openvino bf16"][:3])}
    assert focus(short) is None
    near = {label: [[v * 1.1 for v in r] for r in MEASURED["openvino int8"]] for label in ("a",)}
    close = {"openvino int8": intervals["openvino int8"], "a": bootstrap_interval(near["a"])}
    assert focus(close) is None
    plan = plan_round(list(COSTS.values()), 30.0, intervals={**intervals, "openvino bf16": close["a"]})
    assert plan is not None and not plan.focused and len(plan.labels) == 3
    assert plan_round(list(COSTS.values()), -1.0, 40.0, intervals=intervals) is None
