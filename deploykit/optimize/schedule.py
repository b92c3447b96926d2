"""How the finalists' rounds fit the time left: what each finalist costs (one timed call, a round's
fixed cost, starting its resident worker), measured; the rule's minimum evidence for every finalist
reserved before anything optional; and the length of the next round sized from what is left.

A round of a slow candidate and a round of a fast one count the same for the rule (``MIN_ROUNDS``
rounds of ``MIN_BLOCKS`` blocks), so a round is sized in seconds shared by every finalist, never
longer than ``ROUND_DURATION_S`` and never shorter than ``MIN_CALLS`` calls of that candidate: on a
tight budget the fast candidate's round shrinks to its few calls instead of costing as much as the
slow one's.

Pure arithmetic on measured seconds: nothing here times, runs or ranks anything (``rounds`` does).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from deploykit.optimize.ranking import MIN_BLOCKS, MIN_ROUNDS

MAX_ROUNDS = 12
ROUND_DURATION_S = 0.6  # the longest timed part of one round: spare time goes to more rounds first
MIN_CALLS = MIN_BLOCKS * 3  # a round's blocks have at least 3 calls each (``bench.measure.blocks_of``)
EXCHANGE_S = 0.05  # a resident worker's job and answer, besides its settle and warm-up


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
    """

    duration_s: float
    cost_s: float


def plan_round(
    costs: Sequence[FinalistCost], left_s: float, allowance_s: float | None = None, *, max_rounds: int = MAX_ROUNDS
) -> RoundPlan | None:
    """The next round of ``costs``' finalists, or None when it should not run.

    The time budget left (``left_s``) is spread over the rounds still possible (up to
    ``max_rounds``), so spare time buys more rounds before longer ones. While a finalist is short of
    the rule's minimum evidence, the round runs only if every finalist's minimum still fits
    ``allowance_s`` (``left_s`` unless the search may overrun for it), in rounds as short as needed;
    once all have it, a round runs only if it fits ``left_s``.
    """
    if not costs:
        return None
    allowance = left_s if allowance_s is None else max(left_s, allowance_s)
    starts = sum(c.start_s for c in costs)
    rounds_left = max(1, max_rounds - min(c.rounds for c in costs))
    per_round = (max(0.0, left_s) - starts) / rounds_left
    spread = (per_round - sum(c.overhead_s for c in costs)) / len(costs)
    duration = min(ROUND_DURATION_S, max(0.0, spread))
    if any(c.rounds_short for c in costs):
        for size in (duration, 0.0):  # the planned length, else the shortest rounds the rule accepts
            if sum(c.minimum_s(size) for c in costs) <= allowance:
                return RoundPlan(size, starts + sum(c.round_s(size) for c in costs))
        return None
    cost = starts + sum(c.round_s(duration) for c in costs)
    return RoundPlan(duration, cost) if cost <= left_s else None
