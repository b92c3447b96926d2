"""How the finalists' rounds fit the time left: what each finalist costs (one timed call, a round's
fixed cost, starting its resident worker), measured; the rule's minimum evidence for every finalist
reserved before anything optional; and the length of the next round sized from what is left.

A round of a slow candidate and a round of a fast one count the same for the rule (``MIN_ROUNDS``
rounds of ``MIN_BLOCKS`` blocks), so a round is sized in seconds shared by every finalist, never
longer than ``ROUND_DURATION_S`` and never shorter than ``MIN_CALLS`` calls of that candidate: on a
tight budget the fast candidate's round shrinks to its few calls instead of costing as much as the
slow one's.

Once every finalist has the minimum, the leader and its nearest rival may still overlap although
their estimates are far apart (``CLOSE_GAP``): a few more rounds are likely to separate them, so
the time left goes to rounds of exactly those two (``focus``), up to ``MAX_FOCUSED_ROUNDS``; the
others keep the evidence they have. The rule itself is untouched: more rounds narrow the intervals,
they never lower the bar.

Pure arithmetic on measured seconds: nothing here times, runs or ranks anything (``rounds`` does).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from deploykit.optimize.ranking import MIN_BLOCKS, MIN_ROUNDS, Interval

MAX_ROUNDS = 12
MAX_FOCUSED_ROUNDS = 40  # the leader and its nearest rival, far apart but overlapping: rounds until they separate
CLOSE_GAP = 1.5  # estimates this far apart (slower / faster) whose intervals overlap: worth more rounds
ROUND_DURATION_S = 0.6  # the longest timed part of one round: spare time goes to more rounds first
MIN_CALLS = MIN_BLOCKS * 3  # a round's blocks have at least 3 calls each (``bench.measure.blocks_of``)
EXCHANGE_S = 0.05  # a resident worker's job and answer, besides its settle and warm-up
CLOSING_S = 2.0  # after the last round: ranking, the report and the bundle, within the time budget


@dataclass(frozen=True)
class FinalistCost:
    """What one finalist's rounds cost, from its measurements so far.

    Attributes:
        label: the candidate.
        call_s: one timed call (the mean of its last measurement).
        overhead_s: one round's cost besides its timed calls (warm-up calls, the worker's settle,
            the exchange).
        start_s: starting its resident worker (process, runtime import, model load) before its
            first round there; 0 once started.
        rounds: the rounds it has (its screening round included).
    """

    label: str
    call_s: float
    overhead_s: float
    start_s: float
    rounds: int

    @property
    def rounds_short(self) -> int:
        """Rounds it still needs for the rule's minimum evidence."""
        return max(0, MIN_ROUNDS - self.rounds)

    def round_s(self, duration_s: float) -> float:
        """One round whose timed part lasts ``duration_s`` (at least ``MIN_CALLS`` calls)."""
        return self.overhead_s + max(duration_s, MIN_CALLS * self.call_s)

    def minimum_s(self, duration_s: float = 0.0) -> float:
        """The rest of its minimum evidence, in rounds of ``duration_s``: 0 once it has it."""
        short = self.rounds_short
        return self.start_s + short * self.round_s(duration_s) if short else 0.0


def round_overhead_s(call_s: float, warmup: int, settle_s: float) -> float:
    """A round's fixed cost before one was measured: the warm-up calls, the worker's settle and the exchange."""
    return warmup * call_s + settle_s + EXCHANGE_S


def minimum_evidence_s(costs: Sequence[FinalistCost]) -> float:
    """The least time in which every finalist reaches the rule's minimum evidence (rounds of ``MIN_CALLS`` calls)."""
    return sum(c.minimum_s() for c in costs)


@dataclass(frozen=True)
class RoundPlan:
    """The next interleaved round.

    Attributes:
        duration_s: the timed part of every finalist's round (each has at least ``MIN_CALLS`` calls).
        cost_s: what the round is expected to take, worker starts included.
        labels: who runs it, in the order given.
        focused: only the leader and its nearest rival run it (``focus``).
    """

    duration_s: float
    cost_s: float
    labels: tuple[str, ...] = ()
    focused: bool = False


def focus(intervals: Mapping[str, Interval], *, higher_is_better: bool = False) -> tuple[str, str] | None:
    """The leader and its nearest rival (best estimate first) when more rounds of those two are worth
    the time left: both rest on the rule's evidence, their intervals overlap, and one estimate is at
    least ``CLOSE_GAP`` times the other. None otherwise (too close to separate soon, already
    separate, or a finalist still short of the minimum)."""
    if len(intervals) < 2 or not all(i.sufficient for i in intervals.values()):
        return None
    sign = -1.0 if higher_is_better else 1.0
    leader, rival = sorted(intervals, key=lambda label: sign * intervals[label].estimate)[:2]
    best, next_best = intervals[leader], intervals[rival]
    if best.separated_from(next_best) or min(best.estimate, next_best.estimate) <= 0:
        return None
    gap = max(best.estimate, next_best.estimate) / min(best.estimate, next_best.estimate)
    return (leader, rival) if gap >= CLOSE_GAP else None


def plan_round(
    costs: Sequence[FinalistCost],
    left_s: float,
    allowance_s: float | None = None,
    *,
    max_rounds: int = MAX_ROUNDS,
    intervals: Mapping[str, Interval] | None = None,
    higher_is_better: bool = False,
) -> RoundPlan | None:
    """The next round of ``costs``' finalists, or None when it should not run.

    The time budget left (``left_s``) is spread over the rounds still possible (up to
    ``max_rounds``), so spare time buys more rounds before longer ones. While a finalist is short of
    the rule's minimum evidence, the round runs only if every finalist's minimum still fits
    ``allowance_s`` (``left_s`` unless the search may overrun for it), in rounds as short as needed;
    once all have it, a round runs only if it fits ``left_s``. Given the finalists' ``intervals``
    (by label), a leader and nearest rival that ``focus`` picks get the round alone, and their
    rounds go on to ``MAX_FOCUSED_ROUNDS``.
    """
    if not costs:
        return None
    pair = None
    if intervals is not None and not any(c.rounds_short for c in costs):
        pair = focus({c.label: intervals[c.label] for c in costs}, higher_is_better=higher_is_better)
    if pair is None:
        return _plan(costs, left_s, allowance_s, max_rounds)
    plan = _plan([c for c in costs if c.label in pair], left_s, allowance_s, max(max_rounds, MAX_FOCUSED_ROUNDS))
    return None if plan is None else RoundPlan(plan.duration_s, plan.cost_s, plan.labels, focused=True)


def _plan(costs: Sequence[FinalistCost], left_s: float, allowance_s: float | None, max_rounds: int) -> RoundPlan | None:
    """``plan_round`` for exactly ``costs``' finalists, none past ``max_rounds``."""
    if min(c.rounds for c in costs) >= max_rounds:
        return None
    labels = tuple(c.label for c in costs)
    allowance = left_s if allowance_s is None else max(left_s, allowance_s)
    starts = sum(c.start_s for c in costs)
    rounds_left = max(1, max_rounds - min(c.rounds for c in costs))
    per_round = (max(0.0, left_s) - starts) / rounds_left
    spread = (per_round - sum(c.overhead_s for c in costs)) / len(costs)
    duration = min(ROUND_DURATION_S, max(0.0, spread))
    if any(c.rounds_short for c in costs):
        for size in (duration, 0.0):  # the planned length, else the shortest rounds the rule accepts
            if sum(c.minimum_s(size) for c in costs) <= allowance:
                return RoundPlan(size, starts + sum(c.round_s(size) for c in costs), labels)
        return None
    cost = starts + sum(c.round_s(duration) for c in costs)
    return RoundPlan(duration, cost, labels) if cost <= left_s else None
