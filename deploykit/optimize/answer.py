"""The answer of ``optimize``'s search: every candidate's outcome, the ranking of the accurate ones
(``ranking.rank``: bootstrap intervals, ties to the simpler setup), the speedup over ONNX Runtime
f32 measured in the same run, and the Pareto front of headline against accuracy delta.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Mapping, Sequence
from typing import Any

from deploykit.backends.registry import DEFAULT_BACKEND
from deploykit.bench.rows import ModelInfo
from deploykit.io import file_sha256
from deploykit.optimize.manifest import WAIT_OPTION
from deploykit.optimize.ranking import Ranking, rank
from deploykit.optimize.results import (
    Baseline,
    CandidateResult,
    CandidateStatus,
    GroundTruth,
    OptimizeReport,
    OptimizeSettings,
    Variant,
)
from deploykit.optimize.rounds import Search

BASELINE_BACKEND = DEFAULT_BACKEND


def answer(
    search: Search,
    *,
    settings: OptimizeSettings,
    variants: Sequence[Variant],
    partial: bool,
    notes: list[str],
    started: float,
    device: Mapping[str, Any],
    classes: Sequence[str] = (),
) -> OptimizeReport:
    """The report of a finished (or interrupted) search: every candidate's outcome, the ranking of
    the accurate ones (``ranking.rank``), the baseline and the Pareto front."""
    finalists = search.admissible()
    for state in search.states:  # a measurement cut short by Ctrl-C leaves a candidate without verdict
        if state.alive and state not in finalists:
            state.stopped = "not screened: the search was interrupted" if partial else "not measured"
    unit = "samples/s" if search.scenario == "offline" else "ms"
    # the finalists are ranked, with those the rounds stopped because their interval separated from the
    # leader's (slower by the rule, on the rule's evidence): the chosen one is "faster" than them too. A
    # candidate stopped on one short screening round has no interval, and would make every decision
    # inconclusive: the reason says how far behind it was instead
    ranked = [*finalists, *(s for s in search.states if s.outranked and s not in finalists)]
    ranking: Ranking = rank([s.entry() for s in ranked], higher_is_better=search.scenario == "offline", unit=unit)
    ranking = _with_screened_out(ranking, search, unit)
    if not any(s.accurate and (s.variant.quantized or s.config.precision != "f32") for s in search.states):
        notes.append(
            "only f32 configurations stay within the accuracy budget: the answer is f32 (the "
            "Pareto front shows what reduced precision would cost)"
        )
    intervals = search.intervals([s for s in search.states if s.rounds])
    results = []
    for state in search.states:
        status: CandidateStatus
        if state.label == ranking.chosen:
            status, reason, stage = "chosen", ranking.reason, "final"
        elif state in finalists:
            status, stage = "finalist", "final"
            if ranking.decision == "inconclusive":
                reason = f"inconclusive against {ranking.chosen}, which is simpler: {ranking.reason}"
            elif state.label in ranking.tied:
                reason = f"tied with {ranking.chosen}, which is simpler"
            else:
                reason = f"slower than {ranking.chosen} (intervals separate)"
        else:
            status, reason, stage = "stopped", state.stopped or "", state.stage
        results.append(
            CandidateResult(
                state.label,
                state.variant.name,
                state.config,
                status,
                stage,
                reason,
                tuple(state.rounds),
                intervals.get(state.label),
                state.verdict,
                state.delta,
                state.session,
                state.top1_accuracy,
                state.delta_interval,
            )
        )
    rank_of = {"chosen": 0, "finalist": 1, "stopped": 2}
    results.sort(key=lambda c: (rank_of[c.status], search.score(c.headline) if c.headline else math.inf))
    chosen = next(c for c in results if c.status == "chosen")
    return OptimizeReport(
        model=ModelInfo(
            str(search.model), file_sha256(search.model), list(search.interface.inputs), list(search.interface.outputs)
        ),
        settings=settings,
        task=search.task_name,
        metric=None if search.task is None else search.task.metric,
        oracle=search.oracle,
        variants=tuple(variants),
        candidates=tuple(results),
        chosen=chosen.label,
        decision=ranking,
        baseline=_baseline(results, chosen, search),
        pareto=tuple(_pareto(results, search)),
        partial=partial,
        elapsed_s=round(time.perf_counter() - started, 2),
        device=dict(device),
        notes=tuple(dict.fromkeys(notes)),
        ground_truth=None
        if search.truth is None
        else GroundTruth(tuple(sorted(set(classes))), len(search.truth), search.oracle.name, search.reference_top1),
    )


def _with_screened_out(ranking: Ranking, search: Search, unit: str) -> Ranking:
    """The ranking's reason with what screening left out: how many candidates stopped after one short
    round and how far the nearest was from the chosen one (so a lone finalist is not the only candidate)."""
    out = [s for s in search.states if s.screened_out and s.rounds]
    if not out:
        return ranking
    best = ranking.intervals[ranking.leader].estimate
    nearest = min(out, key=lambda s: search.score(search.intervals([s])[s.label]))
    mine = search.intervals([nearest])[nearest.label].estimate
    ratio = best / mine if search.scenario == "offline" else mine / best
    count = f"{len(out)} other candidate{'s were' if len(out) != 1 else ' was'}"
    note = (
        f"{count} screened out after one short round (a search choice, not a claim of speed), the nearest "
        f"{nearest.label} at {mine:.4g} {unit}, {ratio:.2f}x the best finalist's estimate"
    )
    reason = ranking.reason
    if len(ranking.order) == 1:  # the rule compared it with nothing: it is the only finalist, not the only candidate
        lead = ranking.intervals[ranking.chosen]
        reason = f"the only finalist ({lead.describe(unit)}; {lead.evidence()})"
    return dataclasses.replace(ranking, reason=f"{reason}; {note}")


def _baseline(results: Sequence[CandidateResult], chosen: CandidateResult, search: Search) -> Baseline | None:
    pool = [
        c
        for c in results
        if c.config.backend == BASELINE_BACKEND
        and c.variant == "float"
        and c.config.precision == "f32"
        and c.config.options.get(WAIT_OPTION) is not False  # the runtime as it comes, not tuned for load
        and c.headline is not None
        and c.config.batch == chosen.config.batch
    ]
    if not pool or chosen.headline is None:
        return None
    # the one with the rule's evidence (the reference the rounds measured) before a better estimate
    # from one short screening round
    best = min(pool, key=lambda c: (not c.headline.sufficient, search.score(c.headline)))  # type: ignore[union-attr,arg-type]
    assert best.headline is not None
    ratio = (
        chosen.headline.estimate / best.headline.estimate
        if search.scenario == "offline"
        else best.headline.estimate / chosen.headline.estimate
    )
    return Baseline(best.label, best.headline, round(ratio, 3))


def _pareto(results: Sequence[CandidateResult], search: Search) -> list[str]:
    judged = [
        c
        for c in results
        if c.headline is not None
        and c.accuracy_delta is not None
        and c.verdict is not None
        and c.verdict.status in ("pass", "fail", "unverified")
    ]
    judged.sort(key=lambda c: (search.score(c.headline), c.accuracy_delta))  # type: ignore[arg-type]
    front: list[CandidateResult] = []
    for candidate in judged:
        if not front or candidate.accuracy_delta < front[-1].accuracy_delta:  # type: ignore[operator]
            front.append(candidate)
    return [c.label for c in front]
