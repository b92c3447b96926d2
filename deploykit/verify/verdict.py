"""Verdicts: the one answer to "does this candidate compute the same thing as its oracle?".

A ``Verdict`` is ``pass`` or ``fail`` only when an *independent* oracle (PyTorch, onnx's
reference evaluator, Darknet itself, OpenCV 4's Darknet importer) produced the reference.
Against another backend it is ``unverified``, with ``agreement`` saying whether the two agree.
``degenerate`` means the reference carries no information (constant, all zero, NaN), and
``error`` that the candidate did not run (the runtime's reason, or the signal that killed it).
Every command that says "pass" prints and stores these objects.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from deploykit.errors import legacy_message_and_hint
from deploykit.tasks.base import TaskResult
from deploykit.verify.metrics import (
    ATOL_SHARE_OF_PEAK,
    SCALED_RULE,
    OutputMetrics,
    Thresholds,
    is_reduced,
    normalize_precision,
    scaled_note,
)

Status = Literal["pass", "fail", "unverified", "degenerate", "error"]
STATUSES: tuple[str, ...] = ("pass", "fail", "unverified", "degenerate", "error")


@dataclass(frozen=True)
class OracleInfo:
    """Who produced the reference outputs, and whether that is independent of the candidates.

    Attributes:
        name: e.g. ``pytorch``, ``onnx-reference``, ``darknet``, ``opencv-darknet 4.14.0``,
            ``onnxruntime:cpu``.
        independent: True when the oracle shares no implementation with what it checks.
        detail: how it ran (version, what it compares), or why no independent oracle ran.
    """

    name: str
    independent: bool
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "independent": self.independent, "detail": self.detail}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> OracleInfo:
        return cls(str(data["name"]), bool(data["independent"]), str(data.get("detail") or ""))


@dataclass
class Verdict:
    """One candidate (a backend on a device at a precision) judged against one oracle.

    Attributes:
        candidate: the label of what was checked (``openvino:CPU``).
        status: ``pass``, ``fail``, ``unverified``, ``degenerate`` or ``error``.
        oracle: who produced the reference.
        precision: the precision that actually ran (from the runtime).
        device: the device that actually ran.
        rule: ``element-wise`` (f32/f64) or ``cosine/SNR`` (+ task metric) for reduced precision.
        thresholds: the numbers the rule used.
        outputs: per output and input set: errors, cosine, SNR.
        task: the task metric on real images, when the model is a classifier or detector.
        agreement: with an oracle that is not independent: whether the numbers agree.
        reason: one sentence: why this status (for ``error``, the error's message).
        task_note: on real images, why this row has no task metric (None when it has one, or
            when the inputs were not images).
        hint: for ``error``, the hint of the error that stopped the candidate (how to fix it),
            kept apart from ``reason``; None when it gave none.
    """

    candidate: str
    status: Status
    oracle: OracleInfo
    precision: str | None = None
    device: str | None = None
    rule: str = "element-wise"
    thresholds: Thresholds = field(default_factory=Thresholds)
    outputs: list[OutputMetrics] = field(default_factory=list)
    task: TaskResult | None = None
    agreement: bool | None = None
    reason: str = ""
    task_note: str | None = None
    hint: str | None = None

    @property
    def passed(self) -> bool:
        return self.status == "pass"

    @property
    def label(self) -> str:
        """The status as printed: always one of ``pass``, ``fail``, ``unverified``, ``degenerate``,
        ``error`` (the same word as in JSON); ``reason`` says why, e.g. for ``unverified``
        whether the backends agree with each other."""
        return self.status

    @property
    def failed(self) -> bool:
        """A definite problem: fail, error, or disagreement with another backend."""
        return self.status in ("fail", "error") or self.agreement is False

    @property
    def blocking(self) -> bool:
        """Whether a command that gates on verification must stop here: the verdict failed (fail,
        error, disagreement) or the reference says nothing to judge by (degenerate)."""
        return self.failed or self.status == "degenerate"

    def failures(self) -> list[OutputMetrics]:
        return [o for o in self.outputs if not o.passed]

    def describe(self) -> str:
        """One paragraph: status, against what, by which rule, and the deciding number."""
        text = f"{self.candidate}: {self.label} against {self.oracle.name}"
        if self.precision:
            text += f" ({self.precision}, {self.rule})"
        if self.reason:
            text += f" — {self.reason}"
        return text

    @property
    def explanation(self) -> str:
        """The reason as printed: with the error's hint after it, when there is one."""
        return f"{self.reason} Hint: {self.hint}" if self.hint else self.reason

    def _repr_html_(self) -> str:
        return verdicts_html([self], f"against {self.oracle.name}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "candidate": self.candidate,
            "status": self.status,
            "label": self.label,
            "passed": self.passed,
            "oracle": self.oracle.to_dict(),
            "precision": self.precision,
            "device": self.device,
            "rule": self.rule,
            "thresholds": self.thresholds.to_dict(),
            "outputs": [o.to_dict() for o in self.outputs],
            "task": None if self.task is None else self.task.to_dict(),
            "agreement": self.agreement,
            "reason": self.reason,
            "hint": self.hint,
            "task_note": self.task_note,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Verdict:
        """The verdict ``to_dict`` wrote (``label`` and ``passed`` are derived, so not read); an
        ``error`` verdict of deploykit 0.1, without ``hint``, has its hint inside ``reason``."""
        task = data.get("task")
        reason, hint = data.get("reason", ""), data.get("hint")
        if "hint" not in data and data.get("status") == "error":
            reason, hint = legacy_message_and_hint(reason)
        return cls(
            candidate=data["candidate"],
            status=data["status"],
            oracle=OracleInfo.from_dict(data["oracle"]),
            precision=data.get("precision"),
            device=data.get("device"),
            rule=data.get("rule", "element-wise"),
            thresholds=Thresholds.from_dict(data.get("thresholds") or {}),
            outputs=[OutputMetrics.from_dict(o) for o in data.get("outputs") or []],
            task=None if task is None else TaskResult.from_dict(task),
            agreement=data.get("agreement"),
            reason=reason,
            task_note=data.get("task_note"),
            hint=hint,
        )


def weak_evidence(verdicts: Sequence[Verdict]) -> str | None:
    """What a set of passing verdicts did not prove, or None: the reference's outputs were so small
    that atol had to be scaled to them (``metrics.scaled_atol``), which random weights cause."""
    scaled = [o for v in verdicts for o in v.outputs if o.atol_scaled is not None]
    if not scaled:
        return None
    names = ", ".join(dict.fromkeys(f"'{o.name}'" for o in scaled))
    peak = max(o.atol_scaled or 0.0 for o in scaled) / ATOL_SHARE_OF_PEAK
    return (
        f"the check proved little: the reference's {names} peak at {peak:.3g} (random weights?), too small for atol, "
        "so they were judged with atol scaled to the reference; outputs this small say little of what trained "
        "weights compute"
    )


def worst_status(verdicts: Sequence[Verdict]) -> str:
    """error > fail > degenerate > unverified > pass; ``unverified`` when there is no verdict."""
    present = {v.status for v in verdicts}
    return next((s for s in ("error", "fail", "degenerate", "unverified", "pass") if s in present), "unverified")


def error_verdict(
    candidate: str, oracle: OracleInfo, reason: str, *, device: str | None = None, hint: str | None = None
) -> Verdict:
    """The verdict of a candidate that did not run: the runtime's reason (the error's message, its
    ``hint`` apart), or the signal."""
    return Verdict(candidate, "error", oracle, device=device, reason=reason, hint=hint)


def judge(
    candidate: str,
    outputs: Sequence[OutputMetrics],
    oracle: OracleInfo,
    thresholds: Thresholds,
    *,
    precision: str | None,
    device: str | None = None,
    task: TaskResult | None = None,
) -> Verdict:
    """Turn compared outputs (and a task metric, if any) into a verdict.

    A failing output makes a ``fail`` (``unverified`` + disagreement without an independent
    oracle), whatever else holds; a reference that is degenerate in every output makes
    ``degenerate``; reduced precision also needs the task metric, when there is one, to pass.
    """
    reduced = is_reduced(precision)
    rule = ("cosine/SNR" + (f" + {task.metric}" if task else "")) if reduced else "element-wise"
    if not reduced and any(o.atol_scaled is not None for o in outputs):
        rule = SCALED_RULE
    failures = [o for o in outputs if not o.passed]
    informative = [o for o in outputs if not o.degenerate]
    task_failed = task is not None and reduced and not task.passed
    agrees = not failures and not task_failed
    verdict = Verdict(
        candidate,
        "pass",
        oracle,
        precision=normalize_precision(precision) if precision else None,
        device=device,
        rule=rule,
        thresholds=thresholds,
        outputs=list(outputs),
        task=task,
    )
    if failures:
        verdict.reason = failures[0].describe()
    elif task_failed:
        assert task is not None
        verdict.reason = task.describe()
    elif outputs and not informative:
        verdict.status = "degenerate"
        verdict.reason = f"the reference says nothing: {outputs[0].degenerate}; check the inputs"
        return verdict
    else:
        verdict.reason = _summary(outputs, reduced, task)
    if not oracle.independent:
        verdict.status, verdict.agreement = "unverified", agrees
        relation = "agrees with" if agrees else "DISAGREES with"
        verdict.reason = f"no independent oracle: {relation} {oracle.name}; {verdict.reason}"
        return verdict
    verdict.status = "pass" if agrees else "fail"
    return verdict


def _summary(outputs: Sequence[OutputMetrics], reduced: bool, task: TaskResult | None) -> str:
    if not outputs:
        return "no outputs to compare"
    if reduced:
        cosines = [o.cosine for o in outputs if o.cosine is not None]
        snrs = [o.snr_db for o in outputs if o.snr_db is not None]
        text = f"min cosine {min(cosines):.5f}" if cosines else "cosine undefined"
        text += f", min SNR {min(snrs):.1f} dB" if snrs else ""
        text += f", max abs error {max(o.max_abs_error for o in outputs):.3g} (shown, not judged)"
        return text + (
            f"; {task.describe()}" if task else "; no task metric (it needs a classifier or detector and real images)"
        )
    text = f"max abs error {max(o.max_abs_error for o in outputs):.3g}"
    scaled = [o for o in outputs if o.atol_scaled is not None]
    if scaled:
        tightest = min(scaled, key=lambda o: o.atol_scaled or 0.0)
        assert tightest.atol_scaled is not None
        names = ", ".join(dict.fromkeys(f"'{o.name}'" for o in scaled))
        text += f"; {names}: {scaled_note(tightest.atol_scaled)}"
    return text


@dataclass
class VerificationReport:
    """Every candidate's verdict on one model, against one oracle, on one set of inputs."""

    model: str
    oracle: OracleInfo
    verdicts: list[Verdict]
    inputs: dict[str, list[int]] = field(default_factory=dict)
    input_source: str = "seeded random"
    notes: list[str] = field(default_factory=list)
    emulated_seconds: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Candidate label → ``{platform, load, run}`` seconds of rows that ran under emulation: one
    pass each, marked emulated, never a speed (``deploykit.platforms``); empty on the host."""

    @property
    def status(self) -> str:
        """The worst status over candidates: error > fail > degenerate > unverified > pass."""
        return worst_status(self.verdicts)

    @property
    def passed(self) -> bool:
        return bool(self.verdicts) and all(v.passed for v in self.verdicts)

    def exit_code(self, *, require_oracle: bool = False) -> int:
        """1 when any candidate failed, errored, disagreed or is degenerate; with ``require_oracle``
        also when any verdict is unverified; else 0."""
        bad = any(v.blocking for v in self.verdicts)
        if require_oracle and any(v.status == "unverified" for v in self.verdicts):
            bad = True
        return 1 if bad or not self.verdicts else 0

    def _repr_html_(self) -> str:
        independent = "independent" if self.oracle.independent else "not independent"
        return verdicts_html(self.verdicts, f"{self.model} against {self.oracle.name} ({independent})")

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "oracle": self.oracle.to_dict(),
            "status": self.status,
            "passed": self.passed,
            "inputs": self.inputs,
            "input_source": self.input_source,
            "notes": list(self.notes),
            "verdicts": [v.to_dict() for v in self.verdicts],
        } | ({"emulated_seconds": self.emulated_seconds} if self.emulated_seconds else {})


def verdicts_html(verdicts: Sequence[Verdict], title: str) -> str:
    """A small table of verdicts for notebooks (``_repr_html_``)."""
    from html import escape

    colours = {"pass": "#2a7", "fail": "#c33", "error": "#c33", "degenerate": "#c90", "unverified": "#c90"}
    rows = "".join(
        f"<tr><td>{escape(v.candidate)}</td><td>{escape(v.precision or '-')}</td><td>{escape(v.rule)}</td>"
        f"<td style='color:{colours.get(v.status, '#000')}'>{escape(v.label)}</td><td>{escape(v.explanation)}</td></tr>"
        for v in verdicts
    )
    header = "<tr><th>candidate</th><th>precision</th><th>rule</th><th>verdict</th><th>why</th></tr>"
    return f"<p><b>{escape(title)}</b></p><table>{header}{rows}</table>"
