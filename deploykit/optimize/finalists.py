"""The finalists' rounds of ``optimize``'s search: who becomes a finalist after screening, what
their rounds cost, and the rounds themselves, interleaved (a rotated order each round) until one
finalist is left with the rule's evidence (``ranking.MIN_ROUNDS``), the rounds run out or the next
one does not fit the time budget. A finalist whose interval separates from the leader's on the slow
side stops, with the claim the rule allows; when the leader and its nearest rival are far apart but
still overlap, the time left goes to rounds of those two alone (``schedule.focus``).

How each round fits the time left is ``schedule``'s arithmetic; how one round is measured is the
search's (``rounds.Search``, the one subclass). Nothing here times a model itself or ranks the
answer (``answer`` does).
"""

from __future__ import annotations

import abc
import time
from collections.abc import Sequence

from deploykit.optimize.candidates import WARMUP, CandidateState
from deploykit.optimize.manifest import WAIT_OPTION
from deploykit.optimize.ranking import Interval, bootstrap_interval
from deploykit.optimize.schedule import (
    CLOSING_S,
    MAX_FOCUSED_ROUNDS,
    FinalistCost,
    RoundPlan,
    minimum_evidence_s,
    plan_round,
    round_overhead_s,
)
from deploykit.workers import ResidentWorker

FINALISTS = 4  # the closest screening estimates that get rounds (and the reference, for the speedup)
CLOSE = 1.10  # a screening estimate within this factor of the leader's is close enough to be simpler


class FinalistRounds(abc.ABC):
    """The finalists' part of a search: the search measures (``measure_round``) and shows progress
    (``report``); this part chooses, costs, schedules and stops the finalists.

    Attributes:
        states: every candidate of the search.
        scenario: ``singlestream`` (lower latency is better) or ``offline`` (higher throughput).
        deadline: when the time budget ends (``time.perf_counter`` seconds).
        grace_deadline: how far the finalists' minimum evidence may run past it.
        residents: the finalists' resident workers, by label (``measure_round`` starts each): a round
            costs its measurement, not a new process, the runtime's import and the model's load.
    """

    states: list[CandidateState]
    scenario: str
    deadline: float
    grace_deadline: float
    residents: dict[str, ResidentWorker]

    @abc.abstractmethod
    def measure_round(self, state: CandidateState, duration_s: float) -> None:
        """One round of ``state`` in its resident worker, ``duration_s`` of timed calls (at least the rule's)."""

    @abc.abstractmethod
    def report(self, stage: str, done: int, total: int, label: str = "") -> None:
        """Progress: ``done`` of ``total`` measurements of ``stage``, ``label`` being measured now."""

    # --- the candidates' standing ----------------------------------------------------------
    def admissible(self) -> list[CandidateState]:
        """Candidates still in the search that are verified and within the accuracy budget."""
        return [s for s in self.states if s.rounds and s.accurate and s.stopped is None]

    def intervals(self, states: Sequence[CandidateState]) -> dict[str, Interval]:
        return {
            s.label: bootstrap_interval([list(r.blocks) for r in s.rounds], calls=sum(r.samples for r in s.rounds))
            for s in states
        }

    def score(self, interval: Interval) -> float:
        return -interval.estimate if self.scenario == "offline" else interval.estimate

    def reference(self, among: Sequence[CandidateState] | None = None) -> CandidateState | None:
        """The default backend's best float f32 candidate (of ``among``, default every candidate):
        the speedup's baseline."""
        from deploykit.backends.registry import DEFAULT_BACKEND

        pool = [
            s
            for s in (self.states if among is None else among)
            if s.exact
            and s.rounds
            and s.config.backend == DEFAULT_BACKEND
            and s.accurate
            and s.config.options.get(WAIT_OPTION) is not False
        ]
        return min(pool, key=lambda s: self.score(self.intervals([s])[s.label]), default=None)

    # --- who gets rounds, and what they cost -----------------------------------------------
    def finalists(self, alive: Sequence[CandidateState], *, core: bool = False) -> list[CandidateState]:
        """Who gets rounds: the ``FINALISTS`` best screening estimates, the simplest candidate within
        ``CLOSE`` of the leader and the reference (the speedup's baseline), best first; ``core``: only
        the leader, that simplest candidate and the reference, what a decision cannot do without."""
        if not alive:
            return []
        intervals = self.intervals(alive)
        ranked = sorted(alive, key=lambda s: self.score(intervals[s.label]))
        lead = intervals[ranked[0].label].estimate

        def close(state: CandidateState) -> bool:
            mine = intervals[state.label].estimate
            return mine >= lead / CLOSE if self.scenario == "offline" else mine <= lead * CLOSE

        simplest = min((s for s in ranked if close(s)), key=lambda s: s.entry().simplicity)
        best = ranked[: 1 if core else FINALISTS]
        keep = {id(s) for s in best} | {id(simplest)} | {id(s) for s in [self.reference()] if s}
        return [s for s in ranked if id(s) in keep]

    def cost(self, state: CandidateState) -> FinalistCost:
        """What the candidate's next rounds cost, from its measurements (``schedule.FinalistCost``)."""
        from deploykit.bench.worker import SETTLE_S

        overhead = state.overhead_s
        if overhead is None:  # no round in a running worker yet: its warm-up, settle and exchange
            overhead = round_overhead_s(state.call_s, WARMUP, SETTLE_S)
        start = 0.0 if state.label in self.residents else state.start_s
        return FinalistCost(state.label, state.call_s, overhead, start, len(state.rounds))

    def reserve_s(self, *, core: bool = False) -> float:
        """The finalists' (``core``: the core finalists') minimum evidence as screening stands so far:
        the least time screening must leave them."""
        return minimum_evidence_s([self.cost(s) for s in self.finalists(self.admissible(), core=core)])

    # --- the rounds ------------------------------------------------------------------------
    def halve(self) -> None:
        """The finalists' rounds, interleaved (a rotated order each round), until one finalist is
        left with the rule's evidence, the rounds run out or the next round does not fit
        (``_fit_budget``: then the decision may be inconclusive, and says so)."""
        self._shortlist()
        try:
            self._rounds()
        finally:  # however the rounds end (decided, out of time, Ctrl-C): no resident worker stays
            for worker in self.residents.values():
                worker.close()
            self.residents.clear()

    def _shortlist(self) -> None:
        """After screening: the finalists (``finalists``) get rounds; the rest stop (a search
        choice on one short block, not a claim that they are slower)."""
        alive = self.admissible()
        if not alive:
            return
        intervals = self.intervals(alive)
        finalists = self.finalists(alive)
        leader, lead = finalists[0], intervals[finalists[0].label].estimate
        unit = "samples/s" if self.scenario == "offline" else "ms"
        keep = {id(s) for s in finalists}
        for state in alive:
            if id(state) not in keep:
                state.screened_out = True
                state.stopped = (
                    f"not a finalist: screening estimate {intervals[state.label].estimate:.4g} {unit} against "
                    f"{leader.label}'s {lead:.4g} {unit} (one short round: a search choice, not a claim of speed)"
                )

    def _rounds(self) -> None:
        for number in range(2, MAX_FOCUSED_ROUNDS + 1):  # ``plan_round`` ends them sooner unless focused
            alive = [s for s in self.states if s.alive and s.rounds]
            if not alive or self._decided(alive):
                return
            alive, plan = self._fit_budget(alive, f"round {number - 1}")
            if plan is None:
                return
            stage = f"round {number}"
            measured = [s for s in alive if s.label in plan.labels]
            order = measured[number % len(measured) :] + measured[: number % len(measured)]
            for index, state in enumerate(order):
                self.report(stage, index, len(order), state.label)
                self.measure_round(state, plan.duration_s)
                if not state.alive:
                    state.stage = stage
            self.report(stage, len(order), len(order))
            self._cull(stage)

    def _cull(self, stage: str) -> None:
        """Stop the finalists whose interval separates from the leader's on the slow side: both rest
        on the rule's evidence, so this is a claim the report can make."""
        alive = [s for s in self.states if s.alive and s.rounds]
        if len(alive) < 2:
            return
        intervals = self.intervals(alive)
        alive.sort(key=lambda s: self.score(intervals[s.label]))
        leader, lead = alive[0], intervals[alive[0].label]
        unit = "samples/s" if self.scenario == "offline" else "ms"
        for state in alive[1:]:
            mine = intervals[state.label]
            if mine.separated_from(lead):
                state.outranked = True
                state.stopped = (
                    f"slower than {leader.label}: {mine.describe(unit)} vs {lead.describe(unit)} (intervals "
                    f"separate; {mine.evidence()} vs {lead.evidence()})"
                )
                state.stage = stage

    def _decided(self, alive: Sequence[CandidateState]) -> bool:
        """One finalist left with the rule's evidence: nothing more to measure."""
        return len(alive) <= 1 and all(i.sufficient for i in self.intervals(alive).values())

    def _fit_budget(self, alive: list[CandidateState], stage: str) -> tuple[list[CandidateState], RoundPlan | None]:
        """The candidates whose next round fits and the round's plan (``schedule.plan_round``, from
        their measured costs and intervals): the time budget left sizes the round, and while a
        finalist is short of the rule's minimum evidence the allowance past the budget
        (``rounds.SCREEN_GRACE``) may pay for it. Only then do the slowest stop until it fits, never
        the leader, the simplest candidate tied with it or the reference (the speedup's baseline);
        if even they do not fit, none is measured again. Once every finalist has the minimum, none
        is stopped for time: each keeps its evidence and is ranked with it. The budget keeps
        ``CLOSING_S`` for writing the answer after the last round."""
        intervals = self.intervals(alive)
        ranked = sorted(alive, key=lambda s: self.score(intervals[s.label]))
        lead = intervals[ranked[0].label]
        tied = [s for s in ranked if not intervals[s.label].separated_from(lead)]
        keep = {ranked[0].label, min(tied, key=lambda s: s.entry().simplicity).label}
        keep |= {s.label for s in [self.reference(ranked)] if s is not None}  # the one in the rounds
        now = time.perf_counter() + CLOSING_S
        offline = self.scenario == "offline"
        while True:
            costs = [self.cost(s) for s in ranked]
            plan = plan_round(
                costs, self.deadline - now, self.grace_deadline - now, intervals=intervals, higher_is_better=offline
            )
            if plan is not None:
                return ranked, plan
            slowest = next((s for s in reversed(ranked) if s.label not in keep), None)
            if slowest is None or not any(c.rounds_short for c in costs):
                return [], None
            slowest.stopped = f"over the time budget: no time for another round after {stage}"
            slowest.stage = stage
            ranked.remove(slowest)
