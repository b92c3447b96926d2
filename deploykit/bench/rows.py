"""The typed parts of a benchmark report: what was measured for one configuration (``Row``), the
model, the settings and the recommendation.

Each has ``to_dict()`` giving exactly its part of ``docs/report-schema.json`` and ``from_dict()``
reading it back, so a report written by one deploykit is the same objects when read by another.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from deploykit.backends.base import SessionInfo
from deploykit.bench.config import BenchConfig
from deploykit.bench.stats import LatencyStats
from deploykit.errors import DeployKitError, UsageError, legacy_message_and_hint, problem_of
from deploykit.tensors import TensorSpec
from deploykit.verify.verdict import Verdict

RowStatus = Literal["ok", "failed"]
EnergySource = Literal["rapl", "nvidia-smi", "unavailable"]


def accuracy_delta(verdict: Verdict | None) -> float | None:
    """What a configuration costs in task accuracy: 0 for an element-wise pass (f32), 1 − the task
    metric (top-1 agreement, mAP@0.5) for reduced precision on real images, else unknown (None)."""
    if verdict is None or verdict.status in ("error", "degenerate"):
        return None
    if verdict.rule.startswith("element-wise"):
        return 0.0 if verdict.status == "pass" or verdict.agreement else None
    return None if verdict.task is None else round(1.0 - float(verdict.task.value), 6)


def short_error(error: str | None, limit: int = 60) -> str:
    """An error message (its hint is kept apart) as a table cell, cut to ``limit`` characters
    (the full text is in the JSON)."""
    text = problem_of(error or "")
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass
class Histogram:
    """The warm latency distribution: ``counts[i]`` samples in ``[edges_ms[i], edges_ms[i + 1])``."""

    edges_ms: list[float]
    counts: list[int]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Histogram:
        return cls([float(e) for e in data["edges_ms"]], [int(c) for c in data["counts"]])


@dataclass(frozen=True)
class Block:
    """One consecutive slice of a configuration's timed runs: the unit the ranking resamples
    (``deploykit.optimize.ranking``), so noise within a run shows in its interval."""

    p50_ms: float
    p90_ms: float
    throughput_sps: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Block:
        return cls(float(data["p50_ms"]), float(data["p90_ms"]), float(data["throughput_sps"]))


@dataclass
class Row:
    """One configuration's result: what ran, how fast, and whether it computed the right answer.

    Attributes:
        config: what was asked for (backend, device, batch, threads, precision, scenario).
        status: ``ok``, or ``failed`` with ``error`` saying why (the bench goes on).
        error: why it failed: the error's message, or the crash; ``hint`` how to fix it, apart.
        session: what actually ran, as the runtime reports it (device, precision, providers).
        load_ms, first_inference_ms: model load and the first (cold) inference.
        latency: warm latency statistics (ms); ``latency_histogram`` their distribution.
        wall_s: the timed loop's wall time.
        throughput_sps: samples (batch items) per second.
        peak_rss_bytes: the measuring process's peak resident memory.
        energy_j_per_inference: from RAPL where readable (``energy_source``), else None.
        cost_per_million: the price of a million inferences at the given cost per hour.
        verdict: the verification of this configuration's outputs.
        accuracy_delta: 0 for an element-wise pass, 1 − the task metric for reduced precision on
            real images, None when unknown.
        warnings: e.g. noisy latency.
        stages: for pipeline benchmarks: p50 of pre-processing, inference and post-processing.
        blocks: the timed runs in up to 10 consecutive slices, each with its p50, p90 and throughput;
            with ``--rounds N``, every round's blocks one after the other.
        rounds: with ``--rounds N``, (blocks, timed calls) of each round (``blocks`` holds them in
            order); empty: one round, all of ``blocks``.
    """

    config: BenchConfig
    status: RowStatus
    error: str | None = None
    session: SessionInfo | None = None
    load_ms: float | None = None
    first_inference_ms: float | None = None
    latency: LatencyStats | None = None
    latency_histogram: Histogram | None = None
    wall_s: float | None = None
    throughput_sps: float | None = None
    peak_rss_bytes: int | None = None
    gpu_memory_bytes: int | None = None
    energy_j_per_inference: float | None = None
    energy_source: EnergySource = "unavailable"
    cost_per_million: float | None = None
    verdict: Verdict | None = None
    accuracy_delta: float | None = None
    warnings: list[str] = field(default_factory=list)
    stages: dict[str, float] | None = None
    blocks: list[Block] = field(default_factory=list)
    hint: str | None = None
    rounds: list[tuple[int, int]] = field(default_factory=list)

    def round_blocks(self) -> list[list[Block]]:
        """``blocks`` split by round (one round when ``rounds`` is empty)."""
        if not self.rounds:
            return [list(self.blocks)] if self.blocks else []
        split, start = [], 0
        for count, _ in self.rounds:
            split.append(self.blocks[start : start + count])
            start += count
        return [part for part in split if part]

    def calls(self) -> int:
        """The timed calls behind ``blocks``."""
        if self.rounds:
            return sum(calls for _, calls in self.rounds)
        return self.latency.count if self.latency is not None else 0

    def add_round(self, other: Row) -> None:
        """Append ``other``'s blocks (another round of this configuration) to this row's."""
        if not self.rounds:
            self.rounds.append((len(self.blocks), self.calls()))
        self.blocks.extend(other.blocks)
        self.rounds.append((len(other.blocks), other.latency.count if other.latency is not None else 0))

    @classmethod
    def from_failure(cls, config: BenchConfig, error: str | DeployKitError) -> Row:
        """The row of a configuration that could not be measured: a deploykit error (its message
        and hint kept apart) or the text of what happened (a crash, a timeout)."""
        if isinstance(error, DeployKitError):
            return cls(config, "failed", error.message, hint=error.hint)
        return cls(config, "failed", error)

    @property
    def explanation(self) -> str | None:
        """The error as printed: its message, then its hint, when there is one."""
        return f"{self.error} Hint: {self.hint}" if self.hint else self.error

    def __repr__(self) -> str:
        if not self.ok:
            return f"Row({self.label!r}, failed: {(self.error or '')[:80]!r})"
        p50 = f", p50 {self.latency.p50_ms:.3f} ms" if self.latency else ""
        verdict = f", {self.verdict.label}" if self.verdict else ""
        return f"Row({self.label!r}, ok, {self.precision}{p50}{verdict})"

    @property
    def label(self) -> str:
        return self.config.label()

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def precision(self) -> str | None:
        """The precision that ran (the runtime's word), else the one asked for."""
        return self.session.precision if self.session else self.config.precision

    @property
    def device(self) -> str | None:
        """The device that ran, else the one asked for."""
        return self.session.device if self.session else self.config.device

    @property
    def max_abs_error(self) -> float | None:
        """The largest finite absolute error of any output against the oracle."""
        outputs = self.verdict.outputs if self.verdict else []
        errors = [o.max_abs_error for o in outputs if math.isfinite(o.max_abs_error)]
        return max(errors, default=None)

    def set_verdict(self, verdict: Verdict) -> None:
        """Store the verification of this row's outputs and what it costs in accuracy."""
        self.verdict = verdict
        self.accuracy_delta = accuracy_delta(verdict)

    def latency_ms(self, key: str) -> float:
        """A latency statistic of an ``ok`` row: ``p50_ms``, ``p90_ms``, ``p99_ms``, ``mean_ms`` ...

        Raises:
            UsageError: an unknown statistic, or a row that failed (the message says why it failed).
        """
        keys = [k for k in LatencyStats.__dataclass_fields__ if k.endswith("_ms")]
        if key not in keys:
            raise UsageError(
                f"latency '{key}' | is not a latency statistic, expected one of {', '.join(keys)}.",
                hint="e.g. row.latency_ms('p50_ms').",
            )
        if self.latency is None:
            raise UsageError(
                f"row '{self.label}' | has no latency: it failed ({self.error}).",
                hint="check row.ok first; row.error says why it failed.",
            )
        return float(getattr(self.latency, key))

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "config": self.config.to_dict(),
            "status": self.status,
            "error": self.error,
            "hint": self.hint,
            "session": None if self.session is None else self.session.to_dict(),
            "load_ms": self.load_ms,
            "first_inference_ms": self.first_inference_ms,
            "latency": None if self.latency is None else self.latency.to_dict(),
            "latency_histogram": None if self.latency_histogram is None else self.latency_histogram.to_dict(),
            "wall_s": self.wall_s,
            "throughput_sps": self.throughput_sps,
            "peak_rss_bytes": self.peak_rss_bytes,
            "gpu_memory_bytes": self.gpu_memory_bytes,
            "energy_j_per_inference": self.energy_j_per_inference,
            "energy_source": self.energy_source,
            "cost_per_million": self.cost_per_million,
            "verdict": None if self.verdict is None else self.verdict.to_dict(),
            "accuracy_delta": self.accuracy_delta,
            "warnings": list(self.warnings),
        }
        if self.stages is not None:
            data["stages"] = dict(self.stages)
        if self.blocks:
            data["blocks"] = [b.to_dict() for b in self.blocks]
        if self.rounds:
            data["rounds"] = [list(r) for r in self.rounds]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Row:
        """A row as ``to_dict`` (or an older deploykit of the same schema version) wrote it."""

        def part(key: str, kind: Any) -> Any:
            value = data.get(key)
            return None if value is None else kind.from_dict(value)

        error, hint = data.get("error"), data.get("hint")
        if "hint" not in data and error is not None:  # deploykit 0.1 kept the hint inside the error
            error, hint = legacy_message_and_hint(error)
        return cls(
            config=BenchConfig.from_dict(data["config"]),
            status=data["status"],
            error=error,
            hint=hint,
            session=part("session", SessionInfo),
            load_ms=data.get("load_ms"),
            first_inference_ms=data.get("first_inference_ms"),
            latency=part("latency", LatencyStats),
            latency_histogram=part("latency_histogram", Histogram),
            wall_s=data.get("wall_s"),
            throughput_sps=data.get("throughput_sps"),
            peak_rss_bytes=data.get("peak_rss_bytes"),
            gpu_memory_bytes=data.get("gpu_memory_bytes"),
            energy_j_per_inference=data.get("energy_j_per_inference"),
            energy_source=data.get("energy_source", "unavailable"),
            cost_per_million=data.get("cost_per_million"),
            verdict=part("verdict", Verdict),
            accuracy_delta=data.get("accuracy_delta"),
            warnings=list(data.get("warnings") or []),
            stages=None if data.get("stages") is None else dict(data["stages"]),
            blocks=[Block.from_dict(b) for b in data.get("blocks") or []],
            rounds=[(int(b), int(c)) for b, c in data.get("rounds") or []],
        )


@dataclass
class ModelInfo:
    """The benchmarked file: its path, content hash and interface."""

    path: str
    sha256: str
    inputs: list[TensorSpec] = field(default_factory=list)
    outputs: list[TensorSpec] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "sha256": self.sha256,
            "inputs": [s.to_dict() for s in self.inputs],
            "outputs": [s.to_dict() for s in self.outputs],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ModelInfo:
        return cls(
            data["path"],
            data["sha256"],
            [TensorSpec.from_dict(s) for s in data.get("inputs") or []],
            [TensorSpec.from_dict(s) for s in data.get("outputs") or []],
        )


@dataclass
class BenchSettings:
    """How the benchmark ran.

    Attributes:
        scenario: ``singlestream``, ``offline`` or ``multistream``.
        warmup, iterations, duration_s: untimed runs, then a count or a duration of timed runs.
        seed: the seed of random inputs.
        isolated: each configuration ran in its own worker process.
        cost_per_hour: the device's price, for cost per million inferences.
        inputs: ``seeded random``, ``file`` or ``images``.
        max_drop: the accuracy budget of the recommendation (``--max-drop``).
        pipeline, images: for pipeline benchmarks: the task and the image files.
        background_load: the busy threads the rows were measured under (``{"threads": 0}``: idle).
        rounds: interleaved rounds per configuration (``--rounds``).
    """

    scenario: str = "singlestream"
    warmup: int = 10
    iterations: int | None = 100
    duration_s: float | None = None
    seed: int = 0
    isolated: bool = True
    cost_per_hour: float | None = None
    inputs: str = "seeded random"
    max_drop: float | None = None
    pipeline: str | None = None
    images: list[str] | None = None
    background_load: dict[str, Any] = field(default_factory=lambda: {"threads": 0})
    rounds: int = 1

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for key in ("pipeline", "images"):
            if data[key] is None:
                del data[key]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BenchSettings:
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})


@dataclass
class Recommendation:
    """The configuration to deploy: the fastest one verified (within the accuracy budget, if any).

    Attributes:
        label: the configuration's label.
        headline: ``p50_ms`` (single/multistream) or ``throughput_sps`` (offline).
        value: its headline figure.
        why: one sentence: why this one.
        command: the ``deploykit bench`` command that measures it alone.
        python: the ``deploykit.load(...)`` call that deploys it.
    """

    label: str
    headline: str
    value: float
    why: str
    command: str
    python: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Recommendation:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__})
