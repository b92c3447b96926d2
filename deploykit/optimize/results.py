"""The typed report of ``optimize``: every candidate with its rounds, verdict, accuracy delta and
interval (or why it stopped), the decision and its rule, the Pareto front.

Each value has ``to_dict()`` giving its part of the JSON (``docs/optimize.md`` documents it) and
``from_dict()`` reading it back.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar, Literal

from deploykit.backends.base import SessionInfo
from deploykit.bench.config import BenchConfig
from deploykit.bench.load import BackgroundLoad
from deploykit.bench.rows import ModelInfo
from deploykit.document import JsonDocument
from deploykit.optimize.accuracy import DeltaInterval
from deploykit.optimize.ranking import Interval, Ranking
from deploykit.verify.verdict import OracleInfo, Verdict

SCHEMA = "deploykit.optimize"
SCHEMA_VERSION = 1
HEADLINE = {"singlestream": "p50_ms", "offline": "throughput_sps"}
CandidateStatus = Literal["chosen", "finalist", "stopped"]


@dataclass(frozen=True)
class RoundResult:
    """One isolated measurement of a candidate.

    Attributes:
        p50_ms, p90_ms, p99_ms: its warm latency percentiles.
        throughput_sps: samples per second.
        blocks: the headline figure of each block of its timed runs (what the bootstrap resamples).
        samples: how many timed runs.
    """

    p50_ms: float
    p90_ms: float
    p99_ms: float
    throughput_sps: float
    blocks: tuple[float, ...]
    samples: int

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["blocks"] = list(self.blocks)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RoundResult:
        return cls(
            float(data["p50_ms"]),
            float(data["p90_ms"]),
            float(data["p99_ms"]),
            float(data["throughput_sps"]),
            tuple(float(b) for b in data["blocks"]),
            int(data["samples"]),
        )


@dataclass(frozen=True)
class Variant:
    """One model file the search runs: the float model or a reduced variant of it.

    Attributes:
        name: ``float``, ``int8-ort``, ``int8-nncf`` or ``fp16``.
        file: its file name (in the bundle when chosen).
        precision: what it computes in (``f32``, ``int8``, ``f16``).
        sha256: its content hash.
        engine: the quantize engine that made it (None for the float model; the backend's name for a
            file its own converter makes).
        seconds: how long making it took.
        error: why it could not be made (then no candidate runs it).
        backend: the one backend that runs it, for a reduced-weight file a backend's converter makes from
            the float model (``file``) with ``options`` (LiteRT's ``weights=int8``); None: every backend.
        options: the session options that open it on ``backend``.
    """

    name: str
    file: str
    precision: str
    sha256: str = ""
    engine: str | None = None
    seconds: float = 0.0
    error: str | None = None
    backend: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict)

    @property
    def quantized(self) -> bool:
        return self.name != "float"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Variant:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


@dataclass(frozen=True)
class CandidateResult:
    """One candidate: a model variant on a backend × device × precision × threads × batch.

    Attributes:
        label: ``openvino:CPU b1 t2 bf16 float``.
        variant: the model variant's name.
        config: backend, device, precision, threads, batch, options (what a worker measured).
        status: ``chosen``, ``finalist`` (measured to the end, not chosen) or ``stopped``.
        stage: where it left the search: ``screening``, ``round N`` or ``final``.
        reason: why it stopped, or why it was (not) chosen.
        rounds: its measurements.
        headline: its headline's interval over the rounds (None when it never ran).
        verdict: the verification of its outputs on the held-out images.
        accuracy_delta: 0 for an element-wise pass, 1 − the task metric for reduced precision.
        session: what actually ran (the runtime's report).
        top1_accuracy: its top-1 accuracy against the class folders of ``--images`` (classifiers
            with class folders; None otherwise).
        accuracy_interval: the accuracy delta's 95 % interval over the held-out images, with their
            count (None for an element-wise pass or no task metric).
    """

    label: str
    variant: str
    config: BenchConfig
    status: CandidateStatus
    stage: str
    reason: str
    rounds: tuple[RoundResult, ...] = ()
    headline: Interval | None = None
    verdict: Verdict | None = None
    accuracy_delta: float | None = None
    session: SessionInfo | None = None
    top1_accuracy: float | None = None
    accuracy_interval: DeltaInterval | None = None

    def evidence(self) -> str:
        """``5 / 40 / 612``: the rounds, blocks and timed calls its figures rest on."""
        blocks = sum(len(r.blocks) for r in self.rounds)
        return f"{len(self.rounds)} / {blocks} / {sum(r.samples for r in self.rounds)}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "variant": self.variant,
            "config": self.config.to_dict(),
            "status": self.status,
            "stage": self.stage,
            "reason": self.reason,
            "rounds": [r.to_dict() for r in self.rounds],
            "headline": None if self.headline is None else self.headline.to_dict(),
            "verdict": None if self.verdict is None else self.verdict.to_dict(),
            "accuracy_delta": self.accuracy_delta,
            "session": None if self.session is None else self.session.to_dict(),
            "top1_accuracy": self.top1_accuracy,
            "accuracy_interval": None if self.accuracy_interval is None else self.accuracy_interval.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CandidateResult:
        def part(key: str, kind: Any) -> Any:
            value = data.get(key)
            return None if value is None else kind.from_dict(value)

        return cls(
            label=data["label"],
            variant=data["variant"],
            config=BenchConfig.from_dict(data["config"]),
            status=data["status"],
            stage=data["stage"],
            reason=data.get("reason", ""),
            rounds=tuple(RoundResult.from_dict(r) for r in data.get("rounds") or []),
            headline=part("headline", Interval),
            verdict=part("verdict", Verdict),
            accuracy_delta=data.get("accuracy_delta"),
            session=part("session", SessionInfo),
            top1_accuracy=data.get("top1_accuracy"),
            accuracy_interval=part("accuracy_interval", DeltaInterval),
        )


@dataclass(frozen=True)
class OptimizeSettings:
    """How the search ran.

    Attributes:
        scenario: ``singlestream`` (headline p50) or ``offline`` (headline throughput).
        max_drop: the accuracy budget (0.01 = 1 %).
        time_budget_s: the whole command's time budget.
        quantize: whether INT8/FP16 variants were made.
        images: the images folder (None: seeded random inputs).
        calibration_images, accuracy_images: the two disjoint splits' sizes.
        backends: the backend specs searched.
        threads, batches: the thread counts and batch sizes searched.
        seed: the split's shuffle and random inputs.
        accuracy_files: the held-out images (relative to ``images``) every accuracy figure comes from.
        background_load: the busy threads every measurement ran under (``BackgroundLoad.to_dict``;
            ``{"threads": 0, ...}``: idle).
    """

    scenario: str
    max_drop: float
    time_budget_s: float
    quantize: bool
    images: str | None
    calibration_images: int
    accuracy_images: int
    backends: tuple[str, ...]
    threads: tuple[int, ...]
    batches: tuple[int, ...]
    seed: int = 0
    accuracy_files: tuple[str, ...] = ()
    background_load: Mapping[str, Any] = field(default_factory=lambda: BackgroundLoad().to_dict())

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["background_load"] = dict(self.background_load)
        for key in ("backends", "threads", "batches", "accuracy_files"):
            data[key] = list(data[key])
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> OptimizeSettings:
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        for key in ("backends", "threads", "batches", "accuracy_files"):
            known[key] = tuple(known.get(key) or ())
        return cls(**known)


@dataclass(frozen=True)
class Baseline:
    """The chosen configuration against ONNX Runtime f32 (float model) measured in the same run.

    Attributes:
        label: the ONNX Runtime f32 candidate compared with.
        headline: its interval.
        speedup: baseline headline / chosen headline (latency), or chosen / baseline (throughput).
    """

    label: str
    headline: Interval
    speedup: float

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "headline": self.headline.to_dict(), "speedup": self.speedup}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Baseline:
        return cls(data["label"], Interval.from_dict(data["headline"]), float(data["speedup"]))


@dataclass(frozen=True)
class GroundTruth:
    """Top-1 accuracy against the true classes: the class folders of ``--images`` (classifiers only).

    Attributes:
        classes: the class folders among the held-out images.
        images: how many held-out images (each in a class folder).
        reference: the oracle whose f32 outputs give ``reference_top1_accuracy``.
        reference_top1_accuracy: the f32 oracle's own top-1 accuracy on those images.
    """

    classes: tuple[str, ...]
    images: int
    reference: str
    reference_top1_accuracy: float | None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["classes"] = list(self.classes)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GroundTruth:
        return cls(tuple(data["classes"]), int(data["images"]), data["reference"], data.get("reference_top1_accuracy"))


@dataclass(frozen=True)
class OptimizeReport(JsonDocument):
    """What ``optimize`` found: every candidate, the decision and its rule, the Pareto front.

    Attributes:
        model: the float model (path, SHA-256, interface).
        settings: how the search ran.
        task: ``detect``, ``classify`` or None (no task metric).
        metric: the task metric (``top-1 agreement``, ``mAP@0.5``) or None.
        oracle: who produced the reference outputs.
        variants: the model files searched.
        candidates: every candidate, chosen first, then finalists, then stopped ones.
        chosen: the chosen candidate's label.
        decision: how the finalists were ranked (intervals, tie, rule).
        baseline: the chosen one against ONNX Runtime f32, when that ran.
        pareto: labels no other candidate beats on both headline and accuracy delta, fastest first.
        partial: True when the search was interrupted and this is the best so far.
        elapsed_s: the whole command's wall time.
        device: the machine fingerprint (``deploykit.bench.fingerprint``).
        notes: plain statements (variants that could not be made, fallbacks ...).
        ground_truth: the class folders' true classes and the oracle's top-1 accuracy on them (each
            candidate's is ``CandidateResult.top1_accuracy``); None without class folders.
    """

    model: ModelInfo
    settings: OptimizeSettings
    task: str | None
    metric: str | None
    oracle: OracleInfo
    variants: tuple[Variant, ...]
    candidates: tuple[CandidateResult, ...]
    chosen: str
    decision: Ranking
    baseline: Baseline | None
    pareto: tuple[str, ...]
    partial: bool
    elapsed_s: float
    device: Mapping[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    ground_truth: GroundTruth | None = None

    KIND: ClassVar[str] = "optimize report"
    HINT: ClassVar[str] = "pass the report.json of a bundle written by deploykit optimize."

    @property
    def headline(self) -> str:
        return HEADLINE[self.settings.scenario]

    def candidate(self, label: str) -> CandidateResult | None:
        return next((c for c in self.candidates if c.label == label), None)

    @property
    def best(self) -> CandidateResult:
        """The chosen candidate."""
        found = self.candidate(self.chosen)
        assert found is not None
        return found

    def why(self) -> str:
        """One sentence: what was chosen and which part of the rule decided."""
        best = self.best
        delta = "" if best.accuracy_delta is None else f", accuracy delta {best.accuracy_delta:.2%}"
        speed = "" if self.baseline is None else f", {self.baseline.speedup:.2f}× {self.baseline.label}"
        return f"{best.label}: {self.decision.reason}{delta}{speed}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "schema_version": SCHEMA_VERSION,
            "model": self.model.to_dict(),
            "settings": self.settings.to_dict(),
            "task": self.task,
            "metric": self.metric,
            "oracle": self.oracle.to_dict(),
            "variants": [v.to_dict() for v in self.variants],
            "candidates": [c.to_dict() for c in self.candidates],
            "chosen": self.chosen,
            "decision": self.decision.to_dict(),
            "baseline": None if self.baseline is None else self.baseline.to_dict(),
            "pareto": list(self.pareto),
            "partial": self.partial,
            "elapsed_s": self.elapsed_s,
            "device": dict(self.device),
            "notes": list(self.notes),
            "ground_truth": None if self.ground_truth is None else self.ground_truth.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str | os.PathLike[str] = "<report>") -> OptimizeReport:
        from deploykit.errors import ReportError

        if data.get("schema") != SCHEMA or data.get("schema_version") != SCHEMA_VERSION:
            raise ReportError(
                f"optimize report '{source}' | has schema {data.get('schema')!r} "
                f"version {data.get('schema_version')!r}, expected {SCHEMA!r} version {SCHEMA_VERSION}.",
                hint="read it with the deploykit that wrote it, or run deploykit optimize again.",
            )
        return cls(
            model=ModelInfo.from_dict(data["model"]),
            settings=OptimizeSettings.from_dict(data["settings"]),
            task=data.get("task"),
            metric=data.get("metric"),
            oracle=OracleInfo.from_dict(data["oracle"]),
            variants=tuple(Variant.from_dict(v) for v in data.get("variants") or []),
            candidates=tuple(CandidateResult.from_dict(c) for c in data.get("candidates") or []),
            chosen=data["chosen"],
            decision=Ranking.from_dict(data["decision"]),
            baseline=None if data.get("baseline") is None else Baseline.from_dict(data["baseline"]),
            pareto=tuple(data.get("pareto") or ()),
            partial=bool(data.get("partial", False)),
            elapsed_s=float(data.get("elapsed_s", 0.0)),
            device=dict(data.get("device") or {}),
            notes=tuple(data.get("notes") or ()),
            ground_truth=None if data.get("ground_truth") is None else GroundTruth.from_dict(data["ground_truth"]),
        )
