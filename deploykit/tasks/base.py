"""The ``Task`` plug-in: what every task module writes, and the one judging path they share.

The base class does the judging (decode every input set of both runs, compare, hold the value
against the threshold, return a ``TaskResult``); a task writes only its hooks, the way a backend
writes only ``_run``. A task with an app pipeline also says how that pipeline is made from the
``predict`` settings, which keywords each call takes, and how one image's results render: as JSON
(``predict``, ``serve``, Ray rows), as a table, as one line of a stream and as a drawing. Callers
(``cli/``, ``serve/``, ``distributed/``) ask the task; none of them names one. It must not import
verification (verification imports it).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
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
    """

    name: ClassVar[str]
    metric: ClassVar[str]
    threshold_field: ClassVar[str | None] = None
    pipeline: ClassVar[str | None] = None
    predict_settings: ClassVar[tuple[str, ...]] = ()
    call_parameters: ClassVar[tuple[tuple[str, type], ...]] = ()
    json_key: ClassVar[str] = "results"
    drawing: ClassVar[str | None] = None

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
