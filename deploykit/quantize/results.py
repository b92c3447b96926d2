"""What ``quantize`` reports, as typed objects: the accuracy delta, the speed comparison, the nodes
that diverge most, and the ``QuantizeReport`` that holds them.

Each has ``to_dict()`` giving the JSON that ``deploykit quantize --json`` writes (the same keys, in
the same order, as the plain dicts these classes replace) and ``from_dict()`` reading it back.
This module measures nothing: ``evaluate`` fills these objects, ``api`` assembles the report.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

# the task metrics are the tasks' (``Task.reduced_delta`` measures them); the report holds them
from deploykit.tasks.base import TaskMetric
from deploykit.tasks.classify import ClassificationAgreement
from deploykit.tasks.detect import DetectionDelta

SpeedStatus = Literal["ok", "slower than f32", "error"]


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


@dataclass
class OutputSimilarity:
    """How close one output of the reduced model is to the float model's, all held-out samples together.

    Attributes:
        output: the graph output's name.
        cosine: cosine similarity (1.0 for two equal all-zero arrays, 0.0 for unequal ones).
        snr_db: signal-to-noise ratio in dB (``inf`` when the outputs are equal).
    """

    output: str
    cosine: float
    snr_db: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> OutputSimilarity:
        return cls(str(data["output"]), float(data["cosine"]), float(data["snr_db"]))


TaskDelta = ClassificationAgreement | DetectionDelta | TaskMetric


def _task_from_dict(data: Mapping[str, Any] | None) -> TaskDelta | None:
    if data is None:
        return None
    if "kind" in data:
        return TaskMetric(str(data["kind"]), str(data["metric"]), float(data["value"]), dict(data.get("details") or {}))
    if "map50" in data:
        return DetectionDelta(
            int(data["images"]),
            int(data["reference_boxes"]),
            int(data["candidate_boxes"]),
            float(data["precision"]),
            float(data["recall"]),
            float(data["map50"]),
            float(data["map_min_score"]),
        )
    return ClassificationAgreement(
        int(data["samples"]),
        float(data["top1_agreement"]),
        float(data["top5_overlap"]),
        _float(data["top1_accuracy"]),
        _float(data.get("reference_top1_accuracy")),
    )


@dataclass
class AccuracyDelta:
    """What the reduction costs on the held-out samples, both models on ONNX Runtime CPU.

    Attributes:
        samples: held-out samples measured (0 with ``--held-out 0``: nothing measured).
        backend: where both models ran (``onnxruntime cpu``, which runs QDQ in int8).
        outputs: cosine and SNR per graph output.
        task: the task metric: ``ClassificationAgreement`` for a classifier, ``DetectionDelta``
            for a detector with images, ``TaskMetric`` for another registered task (``embed``);
            None for other models (cosine/SNR only).
        drop: how far the task metric fell (1 − top-1 agreement, the top-1 accuracy drop with
            class folders, 1 − mAP@0.5, or 1 − the task's metric); None without a task metric.
        max_drop: the budget asked for (``--max-drop``), or None.
    """

    samples: int
    backend: str
    outputs: list[OutputSimilarity] = field(default_factory=list)
    task: TaskDelta | None = None
    drop: float | None = None
    max_drop: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "samples": self.samples,
            "backend": self.backend,
            "outputs": [output.to_dict() for output in self.outputs],
            "task": None if self.task is None else self.task.to_dict(),
            "drop": self.drop,
            "max_drop": self.max_drop,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AccuracyDelta:
        return cls(
            samples=int(data["samples"]),
            backend=str(data["backend"]),
            outputs=[OutputSimilarity.from_dict(row) for row in data["outputs"]],
            task=_task_from_dict(data.get("task")),
            drop=_float(data.get("drop")),
            max_drop=_float(data.get("max_drop")),
        )


@dataclass
class SpeedRounds:
    """Each round's p50 (ms) of one configuration: the float model and the reduced one, in order.

    Attributes:
        f32_p50_ms: the float model's p50 per round.
        p50_ms: the reduced model's p50 per round.
    """

    f32_p50_ms: list[float]
    p50_ms: list[float]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SpeedRounds:
        return cls([float(v) for v in data["f32_p50_ms"]], [float(v) for v in data["p50_ms"]])


@dataclass
class SpeedRow:
    """One backend configuration: p50 of the float and the reduced model, and their ratio.

    Attributes:
        configuration: the bench label (backend, device, batch, precision), e.g. ``onnxruntime:cpu b1 f32``.
        status: ``ok``, ``slower than f32`` (never recommended) or ``error`` (``error`` says why).
        f32_p50_ms, p50_ms: median over the rounds of the float and the reduced model's p50; None on error.
        speedup: ``f32_p50_ms / p50_ms``; None on error.
        rounds: each round's p50 of both models; None on error.
        session_precision: the precision the runtime reports running the reduced model in; None on error.
        error: the errors of the configuration's runs, joined by ``; `` (status ``error`` only).
    """

    configuration: str
    status: SpeedStatus
    f32_p50_ms: float | None = None
    p50_ms: float | None = None
    speedup: float | None = None
    rounds: SpeedRounds | None = None
    session_precision: str | None = None
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "configuration": self.configuration,
            "f32_p50_ms": self.f32_p50_ms,
            "p50_ms": self.p50_ms,
            "speedup": self.speedup,
        }
        if self.status == "error":  # a failed configuration has no rounds and no session
            return {**data, "status": self.status, "error": self.error}
        return {
            **data,
            "rounds": None if self.rounds is None else self.rounds.to_dict(),
            "session_precision": self.session_precision,
            "status": self.status,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SpeedRow:
        rounds = data.get("rounds")
        return cls(
            configuration=str(data["configuration"]),
            status=data["status"],
            f32_p50_ms=_float(data.get("f32_p50_ms")),
            p50_ms=_float(data.get("p50_ms")),
            speedup=_float(data.get("speedup")),
            rounds=None if rounds is None else SpeedRounds.from_dict(rounds),
            session_precision=data.get("session_precision"),
            error=data.get("error"),
        )


@dataclass
class SpeedComparison:
    """The float and the reduced model timed on each backend, each configuration in its own worker.

    Attributes:
        iterations: timed runs per configuration and round.
        rounds: how many times the two models alternated (each p50 is the median of the rounds).
        rows: one per configuration, in the order the backend specs expanded.
        recommended: the fastest configuration that is faster than f32, or None.
        best_speedup: the largest speedup among the configurations faster than f32, or None.
    """

    iterations: int
    rounds: int
    rows: list[SpeedRow] = field(default_factory=list)
    recommended: str | None = None
    best_speedup: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "iterations": self.iterations,
            "rounds": self.rounds,
            "rows": [row.to_dict() for row in self.rows],
            "recommended": self.recommended,
            "best_speedup": self.best_speedup,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SpeedComparison:
        return cls(
            iterations=int(data["iterations"]),
            rounds=int(data["rounds"]),
            rows=[SpeedRow.from_dict(row) for row in data["rows"]],
            recommended=data.get("recommended"),
            best_speedup=_float(data.get("best_speedup")),
        )


@dataclass
class LayerDivergence:
    """One node whose output diverges between the float and the reduced model (``--debug-layers``).

    Attributes:
        node: the node's name (what ``--exclude`` takes).
        op_type: its ONNX operator.
        tensor: the output tensor measured.
        snr_db: that tensor's SNR in the reduced model (rounded to 0.01 dB; ``inf`` when equal).
        snr_lost_db: the SNR the node loses relative to its worst input: the error it adds.
        graph_output: whether the tensor is an output of the graph.
    """

    node: str
    op_type: str
    tensor: str
    snr_db: float
    snr_lost_db: float
    graph_output: bool

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LayerDivergence:
        return cls(
            str(data["node"]),
            str(data["op_type"]),
            str(data["tensor"]),
            float(data["snr_db"]),
            float(data["snr_lost_db"]),
            bool(data["graph_output"]),
        )


@dataclass
class QuantizeReport:
    """What ``quantize`` did and measured.

    Attributes:
        model, output: the float model read and the reduced model written (``ir``: OpenVINO IR too).
        precision: ``int8`` or ``f16``.
        engine: ``ort``, ``nncf`` or ``fp16`` (onnxconverter-common).
        method: the ORT calibration method (None for the others).
        per_channel: per-channel weight scales (False for float16).
        task: ``classify``, ``detect`` or None (then only cosine/SNR are measured).
        calibration: the calibration/held-out data: ``source``, ``sha256``, ``calibration_size``,
            ``held_out_size``, ``labelled``, ``notes`` (``CalibrationData.to_dict``). Kept a plain
            dict: it is written into the model's metadata and its notes vary with the source.
        excluded: nodes kept in float: ``head`` (the detector preset) and ``user`` (``exclude``).
        kept_f32_ops: for ``f16``: op type → nodes kept in float32.
        quantized_nodes: QuantizeLinear nodes in the INT8 model (float16: nodes converted).
        seconds: time the engine took.
        accuracy: the task metric on the held-out data, its ``drop``, ``max_drop``, cosine/SNR per output.
        speed: p50 per backend for both models, speedup, the recommended configuration.
        layers: with ``debug_layers``: the nodes that diverge most (top 10).
        notes: plain statements: pre-processing skipped, fewer images than asked, opset raised ...
    """

    model: str
    output: str
    precision: str
    engine: str
    method: str | None
    per_channel: bool
    task: str | None
    calibration: dict[str, Any]
    excluded: dict[str, list[str]]
    kept_f32_ops: dict[str, int]
    quantized_nodes: int
    seconds: float
    accuracy: AccuracyDelta
    speed: SpeedComparison | None = None
    layers: list[LayerDivergence] | None = None
    ir: str | None = None
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "output": self.output,
            "precision": self.precision,
            "engine": self.engine,
            "method": self.method,
            "per_channel": self.per_channel,
            "task": self.task,
            "calibration": dict(self.calibration),
            "excluded": {kind: list(nodes) for kind, nodes in self.excluded.items()},
            "kept_f32_ops": dict(self.kept_f32_ops),
            "quantized_nodes": self.quantized_nodes,
            "seconds": self.seconds,
            "accuracy": self.accuracy.to_dict(),
            "speed": None if self.speed is None else self.speed.to_dict(),
            "layers": None if self.layers is None else [layer.to_dict() for layer in self.layers],
            "ir": self.ir,
            "notes": list(self.notes),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> QuantizeReport:
        """The report ``to_dict`` wrote (``deploykit quantize --json``)."""
        speed, layers = data.get("speed"), data.get("layers")
        return cls(
            model=str(data["model"]),
            output=str(data["output"]),
            precision=str(data["precision"]),
            engine=str(data["engine"]),
            method=data.get("method"),
            per_channel=bool(data["per_channel"]),
            task=data.get("task"),
            calibration=dict(data["calibration"]),
            excluded={str(kind): list(nodes) for kind, nodes in data["excluded"].items()},
            kept_f32_ops={str(op): int(n) for op, n in data["kept_f32_ops"].items()},
            quantized_nodes=int(data["quantized_nodes"]),
            seconds=float(data["seconds"]),
            accuracy=AccuracyDelta.from_dict(data["accuracy"]),
            speed=None if speed is None else SpeedComparison.from_dict(speed),
            layers=None if layers is None else [LayerDivergence.from_dict(row) for row in layers],
            ir=data.get("ir"),
            notes=list(data.get("notes", [])),
        )

    def metadata(self) -> dict[str, Any]:
        """What the quantized model carries under ``deploykit.quantize``."""
        accuracy = self.accuracy.to_dict()
        return {
            "precision": self.precision,
            "engine": self.engine,
            "method": self.method,
            "per_channel": self.per_channel,
            "calibration": {k: self.calibration[k] for k in ("source", "sha256", "calibration_size", "held_out_size")},
            "excluded_nodes": self.excluded,
            "accuracy": {k: accuracy[k] for k in ("task", "drop", "outputs")},
        }
