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

DECISION_RULE = (
    "A is faster than B only when their bootstrap 95% intervals of the headline separate (the "
    "median of per-block figures; rounds resampled, then blocks within each round, 2000 times). "
    "A candidate whose interval overlaps the fastest one's is tied with it, and a tie goes to the "
    "exact answer and the simpler setup: f32 before bf16/f16 before int8, the float model before a "
    "quantized one, fewer threads, a smaller batch."
)

_PRECISION_RANK = {"f64": 0, "f32": 0, "bf16": 1, "f16": 1, "int8": 2}


def precision_rank(precision: str | None) -> int:
    """0 for the exact answer (f32/f64), 1 for bf16/f16, 2 for int8; unknown counts as reduced."""
    return _PRECISION_RANK.get(precision or "", 1)


@dataclass(frozen=True)
class Interval:
    """A headline figure's point estimate and its bootstrap confidence interval.

    Attributes:
        estimate: the median of all blocks of all rounds.
        low, high: the interval's bounds (``low <= estimate <= high`` for a sane sample).
        rounds, blocks: how many rounds and blocks it rests on.
        confidence: the interval's coverage (0.95).
    """

    estimate: float
    low: float
    high: float
    rounds: int
    blocks: int
    confidence: float = CONFIDENCE

    def separated_from(self, other: Interval) -> bool:
        """Whether the two intervals do not overlap."""
        return self.high < other.low or other.high < self.low

    def describe(self, unit: str = "") -> str:
        suffix = f" {unit}" if unit else ""
        return f"{self.estimate:.4g}{suffix} [{self.low:.4g}, {self.high:.4g}]"

    def to_dict(self) -> dict[str, Any]:
        return {
            "estimate": self.estimate,
            "low": self.low,
            "high": self.high,
            "rounds": self.rounds,
            "blocks": self.blocks,
            "confidence": self.confidence,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Interval:
        return cls(
            float(data["estimate"]),
            float(data["low"]),
            float(data["high"]),
            int(data["rounds"]),
            int(data["blocks"]),
            float(data.get("confidence", CONFIDENCE)),
        )


def bootstrap_interval(
    rounds: Sequence[Sequence[float]],
    *,
    resamples: int = RESAMPLES,
    confidence: float = CONFIDENCE,
    seed: int = SEED,
) -> Interval:
    """The median of the block figures with a hierarchical bootstrap percentile interval.

    Each resample draws as many rounds as there are, with replacement, and from each drawn round as
    many blocks as the longest round has, with replacement (so every round weighs the same); the
    statistic is the median of the drawn blocks. A single value gives a zero-width interval.

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
    if pooled.size == 1 or float(pooled.max()) == float(pooled.min()):
        return Interval(estimate, estimate, estimate, len(rounds), int(pooled.size), confidence)
    rng = np.random.default_rng(seed)
    chosen = rng.integers(len(rounds), size=(resamples, len(rounds)))
    picks = np.floor(rng.random((resamples, len(rounds), width)) * lengths[chosen][..., None]).astype(np.int64)
    drawn = padded[chosen[..., None], picks].reshape(resamples, -1)
    medians = np.median(drawn, axis=1)
    tail = (1 - confidence) / 2
    low, high = (float(v) for v in np.quantile(medians, [tail, 1 - tail]))
    return Interval(estimate, min(low, estimate), max(high, estimate), len(rounds), int(pooled.size), confidence)


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
    """

    label: str
    rounds: Sequence[Sequence[float]]
    precision: str | None = "f32"
    quantized: bool = False
    threads: int | None = None
    batch: int = 1

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
    """

    chosen: str
    leader: str
    tied: tuple[str, ...]
    order: tuple[str, ...]
    intervals: Mapping[str, Interval]
    reason: str
    rule: str = DECISION_RULE
    higher_is_better: bool = False

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
    intervals = {e.label: bootstrap_interval(e.rounds) for e in entries}
    sign = -1.0 if higher_is_better else 1.0

    def score(entry: RankEntry) -> float:
        return sign * intervals[entry.label].estimate

    order = sorted(entries, key=lambda e: (score(e), e.simplicity))
    leader = order[0]
    lead = intervals[leader.label]
    tied = [e for e in order if not intervals[e.label].separated_from(lead)]
    chosen = min(tied, key=lambda e: (e.simplicity, score(e)))
    if len(tied) == 1:
        runner = order[1] if len(order) > 1 else None
        reason = (
            "the only candidate"
            if runner is None
            else (
                f"faster: its interval {lead.describe(unit)} separates from every other, the next being "
                f"{runner.label} {intervals[runner.label].describe(unit)}"
            )
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
    )
