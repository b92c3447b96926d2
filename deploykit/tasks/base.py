"""The ``Task`` plug-in: what every task module writes, and the one judging path they share.

The base class does the judging (decode every input set of both runs, compare, hold the value
against the threshold, return a ``TaskResult``); a task writes only its hooks, the way a backend
writes only ``_run``. A task with an app pipeline also says how that pipeline is made from the
``predict`` settings, which keywords each call takes, and how one image's results render: as JSON
(``predict``, ``serve``, Ray rows), as a table, as one line of a stream and as a drawing. Callers
(``cli/``, ``serve/``, ``distributed/``, ``quantize/``) ask the task; none of them names one. It must not import
verification (verification imports it).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from deploykit.io import one_line
from deploykit.tensors import TensorSpec

Outputs = Mapping[str, np.ndarray]


@dataclass(frozen=True)
class ResultTable:
    """One image's results as a table of text: a title, the column names and the rows (the CLI draws it)."""

    title: str
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]


@dataclass
class TaskResult:
    """A task metric on real images (classify: top-1 agreement; detect: mAP@0.5; embed: cosine) and its verdict."""

    kind: str
    metric: str
    value: float
    threshold: float
    passed: bool
    details: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        sign = "≥" if self.passed else "<"
        return f"{self.kind}: {self.metric} {self.value:.3f} {sign} {self.threshold:g}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TaskResult:
        return cls(
            data["kind"],
            data["metric"],
            float(data["value"]),
            float(data["threshold"]),
            bool(data["passed"]),
            dict(data.get("details") or {}),
        )


@dataclass(frozen=True)
class TaskMetric:
    """A task's metric of a reduced model against its float one, as the task's ``judge`` measures it
    (``embed``, ``segment`` ...: the tasks without a measure of their own for ``quantize``).

    Attributes:
        kind: the task (``deploykit.tasks``).
        metric: its metric's name (``embedding cosine``).
        value: the metric's value; the drop is 1 − value.
        details: what the task reports beside it (samples, worst and mean ...).
    """

    kind: str
    metric: str
    value: float
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ReducedModelEvidence:
    """What ``quantize`` hands a task to measure a reduced (INT8, FP16) model against the float model
    it came from, on the held-out samples (``Task.reduced_delta``).

    Attributes:
        float_model: the float ``Model`` the engines read.
        reduced_model: the reduced model's file, with the float model's metadata.
        cases: the held-out feeds, one input set per sample.
        reference: the float model's outputs for each case.
        reduced_outputs: the reduced model's outputs for each case (run when first asked for).
        images: the held-out image files (none when the samples are arrays).
        image_classes: each held-out sample's class folder name, or None (arrays, a flat folder).
        labels: the model's class labels.
        judge_backend: the backend both models run on, and ``judge_options`` its options (f32 inference).
        thresholds: the verification thresholds of the reduced precision (``judge`` holds the metric to them).
        precision: the reduced precision the thresholds are for.
    """

    float_model: Any
    reduced_model: Path
    cases: Sequence[Outputs]
    reference: Sequence[Outputs]
    reduced_outputs: Callable[[], Sequence[Outputs]]
    images: Sequence[Path]
    image_classes: Sequence[str | None]
    labels: Sequence[str]
    judge_backend: str
    judge_options: Mapping[str, Any]
    thresholds: Any
    precision: str = "int8"


class Task:
    """One kind of model answer. Subclasses set the class attributes and write the hooks.

    Attributes:
        name: the one spelling (CLI, metadata ``deploykit.task``, reports).
        metric: the metric's name as verdicts print it.
        threshold_field: the ``Thresholds`` field holding the default minimum (and its CLI override);
            a task without one overrides ``threshold``.
        pipeline: ``"module:Class"`` of the app pipeline that runs the task end to end, or None.
        predict_settings: the ``predict`` settings that change this task's results (a resumable
            ``-o FILE.jsonl`` records them, and resumes only a run made with the same).
        call_parameters: the keywords each pipeline call takes, with their types (``serve`` reads them
            from the request's query).
        json_key: the field of ``serve``'s image answer that holds the results.
        drawing: what ``--draw`` draws (``"boxes"``), or None when the task draws nothing.
        quantize_keeps_head_float: ``quantize`` leaves the model's decoding head (the nodes after the
            last convolution: ``quantize.graph.head_nodes``) in float unless asked to quantize it.
        quantize_budget_needs_images: the metric ``--max-drop`` bounds needs images (the app pipeline
            runs on them): arrays give no budget to hold.
    """

    name: ClassVar[str]
    metric: ClassVar[str]
    threshold_field: ClassVar[str | None] = None
    pipeline: ClassVar[str | None] = None
    predict_settings: ClassVar[tuple[str, ...]] = ()
    call_parameters: ClassVar[tuple[tuple[str, type], ...]] = ()
    json_key: ClassVar[str] = "results"
    drawing: ClassVar[str | None] = None
    quantize_keeps_head_float: ClassVar[bool] = False
    quantize_budget_needs_images: ClassVar[bool] = False

    @classmethod
    def recognise(
        cls, outputs: Mapping[str, TensorSpec], metadata: Mapping[str, str], stated: str | None
    ) -> Task | None:
        """An instance of this task for a model with these outputs and metadata, or None.

        ``stated`` is the task the metadata names (``deploykit.task``), already checked.
        """
        raise NotImplementedError

    def decode(self, outputs: Outputs, feeds: Outputs, *, reference: bool) -> Any:
        """The answer of one input set: scores, detections, an embedding ... ``reference`` says
        whose (a task may decode the reference's answers as truth and the candidate's as ranked)."""
        raise NotImplementedError

    def agreement(self, reference: Sequence[Any], candidate: Sequence[Any]) -> tuple[float, dict[str, Any]]:
        """The metric's value over every input set's answers, and its details."""
        raise NotImplementedError

    def threshold(self, thresholds: Any, precision: str | None) -> float:
        """The minimum the metric must reach: the ``Thresholds`` field the task names (which the
        thresholds of the candidate's precision and the user's overrides already hold)."""
        assert self.threshold_field is not None, f"task {self.name} names no threshold field"
        return float(getattr(thresholds, self.threshold_field))

    def judge(
        self,
        cases: Sequence[Outputs],
        reference: Sequence[Outputs],
        candidate: Sequence[Outputs],
        thresholds: Any,
        precision: str | None = None,
    ) -> TaskResult:
        """The candidate's task metric against the reference over every input set (one image each)."""
        expected = [self.decode(r, feeds, reference=True) for feeds, r in zip(cases, reference, strict=True)]
        found = [self.decode(c, feeds, reference=False) for feeds, c in zip(cases, candidate, strict=True)]
        value, details = self.agreement(expected, found)
        minimum = self.threshold(thresholds, precision)
        return TaskResult(self.name, self.metric, value, minimum, value >= minimum, details)

    @classmethod
    def reduced_delta(cls, evidence: ReducedModelEvidence) -> tuple[Any, float | None, list[str]]:
        """The task metric of a reduced model against its float one, its drop (what ``--max-drop``
        bounds) and notes for the report. By default the task judges the outputs as verification
        does (drop = 1 − value); None and None when the task does not recognise the float model."""
        model = evidence.float_model
        task = cls.recognise(model.output_specs(), model.metadata_props, cls.name)  # quantize chose this task
        if task is None:
            return None, None, []
        outputs = evidence.reduced_outputs()
        result = task.judge(evidence.cases, evidence.reference, outputs, evidence.thresholds, evidence.precision)
        metric = TaskMetric(result.kind, result.metric, result.value, result.details)
        return metric, round(1.0 - result.value, 9), []

    @classmethod
    def pipeline_class(cls) -> Any:
        """The app pipeline class (``Detector``, ``Classifier``), imported on first use."""
        if cls.pipeline is None:
            return None
        module, _, attribute = cls.pipeline.partition(":")
        return getattr(importlib.import_module(module), attribute)

    @classmethod
    def results_agree(cls, ours: Sequence[Any], theirs: Sequence[Any]) -> bool:
        """Whether two backends' pipeline results for one image are the same answer."""
        raise NotImplementedError

    @classmethod
    def pipeline_options(cls, settings: Mapping[str, Any]) -> dict[str, Any]:
        """The pipeline's keyword arguments from ``predict``'s settings (``labels``, ``conf`` ...), in
        a form that travels to Ray workers as JSON."""
        return {"labels": settings.get("labels")}

    @classmethod
    def call_options(cls, settings: Mapping[str, Any]) -> dict[str, Any]:
        """The keywords of each pipeline call that ``settings`` gives (the others keep the pipeline's)."""
        return {name: settings[name] for name, _ in cls.call_parameters if settings.get(name) is not None}

    @classmethod
    def open_pipeline(
        cls, model: Any, backend: str | None, device: str | None, settings: Mapping[str, Any], **options: Any
    ) -> Any:
        """The task's app pipeline on ``model`` (a path, ``Model``, bundle or open ``Session``)."""
        return cls.pipeline_class()(model, backend, device, **options, **cls.pipeline_options(settings))

    @classmethod
    def to_json(cls, results: Sequence[Any]) -> Any:
        """One image's results as JSON-serialisable values (``predict``, ``serve``, Ray rows)."""
        return [result.to_dict() for result in results]

    @classmethod
    def table(cls, results: Sequence[Any], source: str, settings: Mapping[str, Any]) -> ResultTable:
        """One image's results as a table (``predict`` on one image)."""
        raise NotImplementedError

    @classmethod
    def describe(cls, results: Sequence[Any]) -> str:
        """One image's results on one line (a stream's frame line): the first eight labels and scores."""
        parts = [f"{one_line(r.label, 40)} {r.score:.2f}" for r in results[:8]]
        more = f" (+{len(results) - 8})" if len(results) > 8 else ""
        return ", ".join(parts) + more if parts else "nothing"

    @classmethod
    def draw(cls, image: np.ndarray, results: Sequence[Any]) -> np.ndarray:
        """A copy of a BGR image with the results drawn on it; only a task whose ``drawing`` is set."""
        raise NotImplementedError(f"task {cls.name} draws nothing")
