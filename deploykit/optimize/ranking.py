"""Ranking configurations by a noisy headline figure: bootstrap intervals, "faster" only when they
separate, and ties to the simpler setup.

The one ranking of deploykit: ``optimize`` ranks its candidates with it and ``bench``'s
recommendation (``BenchmarkReport.best``) ranks its rows with it. Pure functions of numbers; no
timing, no runtime and no import of ``bench`` happens here.

The samples of one configuration are *rounds* (one isolated measurement each), and each round is
a list of *blocks* (consecutive slices of its timed runs) with the headline figure of each block
(p50 in ms, or throughput in samples/s). The bootstrap resamples rounds, then blocks within each
chosen round, so run-to-run noise (another worker, another moment) widens the interval as much as
the noise within one run does.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

RESAMPLES = 2000
CONFIDENCE = 0.95
SEED = 0
# The least evidence a bootstrap interval is computed from, per side: fewer rounds and the
# resampled medians repeat a handful of values (one round: a zero-width interval) and separate by
# chance; a round of fewer blocks has no within-run spread to resample.
MIN_ROUNDS = 5
MIN_BLOCKS = 3

DECISION_RULE = (
    "A is faster than B only when both have at least 5 interleaved rounds of at least 3 blocks each "
    "and their bootstrap 95% intervals of the headline separate (the median of per-block p50 latency, "
    "or throughput offline; rounds resampled, then blocks within each round, 2000 times). With less "
    "evidence no interval is computed and the decision is inconclusive. A candidate whose interval "
    "overlaps the fastest one's is tied with it, and a tie, or an inconclusive decision, goes to the "
    "exact answer and the simpler setup: f32 before bf16/f16 before int8, the float model before a "
    "quantized one, fewer threads, a smaller batch."
)
INSUFFICIENT = "insufficient evidence"

_PRECISION_RANK = {"f64": 0, "f32": 0, "bf16": 1, "f16": 1, "int8": 2}


def precision_rank(precision: str | None) -> int:
    """0 for the exact answer (f32/f64), 1 for bf16/f16, 2 for int8; unknown counts as reduced."""
    return _PRECISION_RANK.get(precision or "", 1)


def enough_evidence(rounds: int, fewest_blocks: int) -> bool:
    """Whether ``rounds`` rounds whose shortest has ``fewest_blocks`` blocks meet the rule's minimum."""
    return rounds >= MIN_ROUNDS and fewest_blocks >= MIN_BLOCKS


@dataclass(frozen=True)
class Interval:
    """A headline figure's point estimate and, given enough evidence, its bootstrap confidence interval.

    Attributes:
        estimate: the median of all blocks of all rounds.
        low, high: the interval's bounds (``low <= estimate <= high``); None when the evidence is
            below the rule's minimum (``MIN_ROUNDS`` rounds of ``MIN_BLOCKS`` blocks): no interval.
        rounds, blocks: how many rounds and blocks it rests on.
        confidence: the interval's coverage (0.95).
        fewest_blocks: the blocks of its shortest round.
        calls: the timed calls behind it (0: not recorded).
    """

    estimate: float
    low: float | None
    high: float | None
    rounds: int
    blocks: int
    confidence: float = CONFIDENCE
    fewest_blocks: int = 0
    calls: int = 0

    @property
    def sufficient(self) -> bool:
        """Whether the interval rests on the rule's minimum of evidence (then it has bounds; an
        interval read from an older report without its evidence counts never is)."""
        return self.low is not None and self.high is not None and enough_evidence(self.rounds, self.fewest_blocks)

    def separated_from(self, other: Interval) -> bool:
        """Whether both intervals rest on the rule's evidence and do not overlap; otherwise never."""
        if not (self.sufficient and other.sufficient):
            return False
        assert self.low is not None and self.high is not None and other.low is not None and other.high is not None
        return self.high < other.low or other.high < self.low

    def evidence(self) -> str:
        """``5 rounds, 40 blocks, 600 calls``: what the figure rests on."""
        calls = f", {self.calls} calls" if self.calls else ""
        return f"{self.rounds} round{'s' if self.rounds != 1 else ''}, {self.blocks} blocks{calls}"

    def bounds(self) -> str:
        """``[9.1, 9.4]``, or ``insufficient evidence`` when there is no interval."""
        if not self.sufficient or self.low is None or self.high is None:
            return INSUFFICIENT
        return f"[{self.low:.4g}, {self.high:.4g}]"

    def describe(self, unit: str = "") -> str:
        suffix = f" {unit}" if unit else ""
        if not self.sufficient:
            return f"{self.estimate:.4g}{suffix} ({INSUFFICIENT}: {self.evidence()})"
        return f"{self.estimate:.4g}{suffix} {self.bounds()}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "estimate": self.estimate,
            "low": self.low,
            "high": self.high,
            "rounds": self.rounds,
            "blocks": self.blocks,
            "fewest_blocks": self.fewest_blocks,
            "calls": self.calls,
            "sufficient": self.sufficient,
            "confidence": self.confidence,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Interval:
        def bound(key: str) -> float | None:
            value = data.get(key)
            return None if value is None else float(value)

        return cls(
            float(data["estimate"]),
            bound("low"),
            bound("high"),
            int(data["rounds"]),
            int(data["blocks"]),
            float(data.get("confidence", CONFIDENCE)),
            int(data.get("fewest_blocks", 0)),
            int(data.get("calls", 0)),
        )


def bootstrap_interval(
    rounds: Sequence[Sequence[float]],
    *,
    resamples: int = RESAMPLES,
    confidence: float = CONFIDENCE,
    seed: int = SEED,
    calls: int = 0,
) -> Interval:
    """The median of the block figures with a hierarchical bootstrap percentile interval.

    Each resample draws as many rounds as there are, with replacement, and from each drawn round as
    many blocks as the longest round has, with replacement (so every round weighs the same); the
    statistic is the median of the drawn blocks. Below ``MIN_ROUNDS`` rounds of ``MIN_BLOCKS``
    blocks no interval is computed (``low``/``high`` None: insufficient evidence).

    Raises:
        ValueError: no rounds, or a round without blocks.
    """
    if not rounds or any(len(r) == 0 for r in rounds):
        raise ValueError("bootstrap_interval needs at least one round of at least one block")
    lengths = np.array([len(r) for r in rounds])
    width = int(lengths.max())
    padded = np.zeros((len(rounds), width))
    for index, values in enumerate(rounds):
        padded[index, : len(values)] = values
    pooled = np.concatenate([np.asarray(r, dtype=np.float64) for r in rounds])
    estimate = float(np.median(pooled))
    fewest = int(lengths.min())
    if not enough_evidence(len(rounds), fewest):
        return Interval(estimate, None, None, len(rounds), int(pooled.size), confidence, fewest, calls)
    if float(pooled.max()) == float(pooled.min()):  # a clock too coarse to resolve it: the value is exact
        return Interval(estimate, estimate, estimate, len(rounds), int(pooled.size), confidence, fewest, calls)
    rng = np.random.default_rng(seed)
    chosen = rng.integers(len(rounds), size=(resamples, len(rounds)))
    picks = np.floor(rng.random((resamples, len(rounds), width)) * lengths[chosen][..., None]).astype(np.int64)
    drawn = padded[chosen[..., None], picks].reshape(resamples, -1)
    medians = np.median(drawn, axis=1)
    tail = (1 - confidence) / 2
    low, high = (float(v) for v in np.quantile(medians, [tail, 1 - tail]))
    return Interval(
        estimate, min(low, estimate), max(high, estimate), len(rounds), int(pooled.size), confidence, fewest, calls
    )


@dataclass(frozen=True)
class RankEntry:
    """One configuration to rank.

    Attributes:
        label: how it is named in the report.
        rounds: per round, the headline figure of each block.
        precision: the precision it computes in (f32, bf16, f16, int8).
        quantized: whether its model is a quantized (or float16) variant of the float model.
        threads: its thread count (None: the runtime's default, counted as the most).
        batch: its batch size.
        calls: the timed calls behind its rounds (reported with the evidence; 0: not recorded).
    """

    label: str
    rounds: Sequence[Sequence[float]]
    precision: str | None = "f32"
    quantized: bool = False
    threads: int | None = None
    batch: int = 1
    calls: int = 0

    @property
    def simplicity(self) -> tuple[int, int, float, int]:
        """Smaller is simpler: precision, then model variant, then threads, then batch."""
        threads = math.inf if self.threads is None else float(self.threads)
        return (precision_rank(self.precision), int(self.quantized), threads, self.batch)


@dataclass(frozen=True)
class Ranking:
    """The outcome of ``rank``: who is chosen and by which part of the rule.

    Attributes:
        chosen: the label to deploy.
        leader: the label with the best point estimate.
        tied: labels whose interval overlaps the leader's (the leader included), best first.
        order: every label, best point estimate first.
        intervals: label → its interval.
        reason: one sentence: which part of the rule decided.
        rule: the decision rule (``DECISION_RULE``).
        higher_is_better: True for throughput.
        decision: ``faster`` (the chosen one's interval separates from every other), ``tied``
            (intervals overlap: the simpler setup) or ``inconclusive`` (too little evidence to say:
            the simpler setup).
    """

    chosen: str
    leader: str
    tied: tuple[str, ...]
    order: tuple[str, ...]
    intervals: Mapping[str, Interval]
    reason: str
    rule: str = DECISION_RULE
    higher_is_better: bool = False
    decision: str = "faster"

    def to_dict(self) -> dict[str, Any]:
        return {
            "chosen": self.chosen,
            "leader": self.leader,
            "tied": list(self.tied),
            "order": list(self.order),
            "intervals": {label: interval.to_dict() for label, interval in self.intervals.items()},
            "reason": self.reason,
            "rule": self.rule,
            "higher_is_better": self.higher_is_better,
            "decision": self.decision,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Ranking:
        return cls(
            chosen=data["chosen"],
            leader=data["leader"],
            tied=tuple(data.get("tied") or ()),
            order=tuple(data.get("order") or ()),
            intervals={k: Interval.from_dict(v) for k, v in (data.get("intervals") or {}).items()},
            reason=data.get("reason", ""),
            rule=data.get("rule", DECISION_RULE),
            higher_is_better=bool(data.get("higher_is_better", False)),
            decision=str(data.get("decision", "faster")),
        )


def _simpler_because(chosen: RankEntry, leader: RankEntry) -> str:
    mine, theirs = chosen.simplicity, leader.simplicity
    if mine[0] < theirs[0]:
        return f"{chosen.precision or 'its precision'} before {leader.precision or 'reduced precision'}"
    if mine[1] < theirs[1]:
        return "the float model before a quantized one"
    if mine[2] < theirs[2]:
        return "fewer threads"
    return "a smaller batch"


def rank(entries: Sequence[RankEntry], *, higher_is_better: bool = False, unit: str = "") -> Ranking:
    """Rank ``entries`` by their headline with ``DECISION_RULE``.

    The leader is the best point estimate; every entry whose interval overlaps the leader's is
    tied with it; the chosen one is the simplest of the tied (``RankEntry.simplicity``), then the
    better estimate.

    Raises:
        ValueError: nothing to rank, or two entries with one label.
    """
    if not entries:
        raise ValueError("rank needs at least one entry")
    by_label = {e.label: e for e in entries}
    if len(by_label) != len(entries):
        raise ValueError("rank needs one entry per label")
    intervals = {e.label: bootstrap_interval(e.rounds, calls=e.calls) for e in entries}
    sign = -1.0 if higher_is_better else 1.0

    def score(entry: RankEntry) -> float:
        return sign * intervals[entry.label].estimate

    order = sorted(entries, key=lambda e: (score(e), e.simplicity))
    leader = order[0]
    lead = intervals[leader.label]
    tied = [e for e in order if not intervals[e.label].separated_from(lead)]
    chosen = min(tied, key=lambda e: (e.simplicity, score(e)))
    short = [e for e in tied if not intervals[e.label].sufficient]
    decision = "inconclusive" if short and len(order) > 1 else ("faster" if len(tied) == 1 else "tied")
    if len(order) == 1:
        reason = f"the only candidate ({lead.describe(unit)}; {lead.evidence()})"
    elif decision == "inconclusive":
        thin = ", ".join(f"{e.label} {intervals[e.label].evidence()}" for e in short)
        simpler = "" if chosen is leader else f"; the simpler setup goes first: {_simpler_because(chosen, leader)}"
        reason = (
            f"inconclusive: {INSUFFICIENT} to call any candidate faster (the rule needs {MIN_ROUNDS} rounds of "
            f"at least {MIN_BLOCKS} blocks per side; {thin}); best estimate {leader.label} "
            f"{lead.estimate:.4g}{' ' + unit if unit else ''}{simpler}"
        )
    elif decision == "faster":
        runner = order[1]
        reason = (
            f"faster: its interval {lead.describe(unit)} ({lead.evidence()}) separates from every other, the next "
            f"being {runner.label} {intervals[runner.label].describe(unit)} ({intervals[runner.label].evidence()})"
        )
    elif chosen is leader:
        others = ", ".join(e.label for e in tied if e is not leader)
        reason = (
            f"the best estimate {lead.describe(unit)}; tied with {others} (intervals overlap), none of them simpler"
        )
    else:
        reason = (
            f"tied with the fastest estimate, {leader.label} {lead.describe(unit)} (intervals overlap: "
            f"{intervals[chosen.label].describe(unit)}); the tie goes to the simpler setup: "
            f"{_simpler_because(chosen, leader)}"
        )
    return Ranking(
        chosen=chosen.label,
        leader=leader.label,
        tied=tuple(e.label for e in tied),
        order=tuple(e.label for e in order),
        intervals=intervals,
        reason=reason,
        higher_is_better=higher_is_better,
        decision=decision,
    )
