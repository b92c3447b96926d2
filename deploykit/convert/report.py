"""The conversion report every converter returns and ``--report`` writes as JSON (the shared
report protocol of ``deploykit.document``: ``to_dict``, ``from_dict``, ``write``), and the
``--report`` folder that holds it."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from deploykit.document import JsonDocument
from deploykit.errors import OutputError, ReportError
from deploykit.io import check_outputs, check_report_folder
from deploykit.verify.verdict import OracleInfo, Verdict, worst_status

REPORT_FILE = "report.json"
"""What ``convert --report DIR`` and ``models build --report DIR`` write into the folder."""


@dataclass
class ConversionReport(JsonDocument):
    """What a conversion did and how well the result matches its source."""

    KIND: ClassVar[str] = "conversion report"
    HINT: ClassVar[str] = "pass the --report file written by deploykit convert."

    source: str
    output: str
    converter: str
    exporter: str
    opset: int
    export_seconds: float
    gate_seconds: float = 0.0
    file_size_bytes: int = 0
    parameter_count: int = 0
    external_data: bool = False
    simplified: bool = False
    notes: list[str] = field(default_factory=list)
    op_histogram: dict[str, int] = field(default_factory=dict)
    verdicts: list[Verdict] = field(default_factory=list)
    oracle: OracleInfo | None = None
    input_sets: list[dict[str, list[int]]] = field(default_factory=list)
    """The shapes of every input set the verification ran (a second one doubles each dynamic axis)."""
    written: bool = False

    @property
    def passed(self) -> bool:
        """No backend failed, crashed, disagreed or met a degenerate reference: the file may be written.
        (Without an independent oracle this holds with every verdict ``unverified``; see ``status``.)"""
        return not any(v.blocking for v in self.verdicts)

    @property
    def status(self) -> str:
        """The worst verdict: error > fail > degenerate > unverified > pass (``unverified`` when none ran)."""
        return worst_status(self.verdicts)

    def _repr_html_(self) -> str:
        from deploykit.verify.verdict import verdicts_html

        oracle = self.oracle.name if self.oracle else "nothing"
        return verdicts_html(self.verdicts, f"{self.source} → {self.output}: verified against {oracle}")

    def failing_verdict(self) -> Verdict | None:
        """The first verdict that stops the conversion (fail, error, disagreement, degenerate), if any."""
        return next((v for v in self.verdicts if v.blocking), None)

    def first_failure(self) -> str:
        """One clause about the first verdict that stops the conversion, to end a sentence with.

        An error row's hint (``Verdict.hint``) is left out here (``failure_hint`` places it) and so
        is the final period, so that the caller's sentence neither shows two hints nor ends in "..".
        """
        bad = self.failing_verdict()
        return bad.describe().rstrip().rstrip(".") if bad else "no failure"

    def failure_hint(self, *, kept: bool, mismatch: str) -> str:
        """The hint of the error a failed verification raises.

        Args:
            kept: the file was written anyway (``keep_on_mismatch``).
            mismatch: the converter's advice for numbers that disagree with the oracle.

        A backend that could not run the model (an ``error`` row) compared no numbers, so the
        converter's advice for a numeric disagreement does not fit: the hint names the backend
        and passes on the hint its own error gave.
        """
        written = "the file was kept because of --keep-on-mismatch. " if kept else "nothing was written. "
        bad = self.failing_verdict()
        if bad is not None and bad.status == "degenerate":
            return written + (
                "The source model's own outputs carry no information on these inputs (NaN, or one constant), so "
                "no check could fail: convert with example inputs on which the model computes numbers, or fix the "
                "model (a division by zero, a log of a negative, an uninitialised buffer)."
            )
        if bad is None or bad.status != "error":
            return written + mismatch
        inner = bad.hint
        backend = bad.candidate.split(":")[0]
        return (
            written
            + f"{bad.candidate} could not run the converted model, so nothing was compared"
            + (f"; its hint: {inner}" if inner else ".")
            + ("" if not inner or inner.endswith(".") else ".")
            + f" If you do not deploy on {backend}, leave it out of --verify-backends."
        )

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["verdicts"] = [v.to_dict() for v in self.verdicts]
        data["oracle"] = None if self.oracle is None else self.oracle.to_dict()
        data["passed"] = self.passed
        data["status"] = self.status
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str | os.PathLike[str] = "<report>") -> ConversionReport:
        """The report ``to_dict`` wrote (``passed`` and ``status`` are derived again, not read).

        Raises:
            ReportError: not a conversion report (no converter, output or verdicts).
        """
        if not isinstance(data, Mapping) or not {"converter", "output", "verdicts"} <= set(data):
            raise cls.invalid(source, "is not a deploykit conversion report (no converter, output and verdicts).")
        fields = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        fields["verdicts"] = [Verdict.from_dict(v) for v in data["verdicts"]]
        fields["oracle"] = None if data.get("oracle") is None else OracleInfo.from_dict(data["oracle"])
        return cls(**fields)


def check_conversion_report_folder(
    directory: str | os.PathLike[str],
    *,
    inputs: Iterable[str | os.PathLike[str]] = (),
    output: str | os.PathLike[str] | None = None,
) -> None:
    """Refuse a ``--report`` folder before the conversion runs: one that cannot be written
    (``deploykit.io.check_report_folder``), the model's own path (whose own checks come first, so
    that making the folder cannot make the model's missing directory), or an existing folder that holds
    other files and no earlier conversion report (its files would be mixed with another kind's,
    e.g. a bench report's report.json replaced).

    Raises:
        OutputError: naming the folder and why it cannot take the report.
    """
    folder = Path(directory)
    if output is not None:
        if os.path.realpath(folder) == os.path.realpath(output):
            raise OutputError(
                f"--report '{folder}' | is also the path of output '{output}'.",
                hint="give the report its own folder, e.g. --report report/.",
            )
        check_outputs({"output": output})  # first: making the report folder must not make the model's folder
    check_report_folder(folder, (REPORT_FILE,), inputs=inputs)
    if not folder.is_dir() or not any(folder.iterdir()):
        return
    try:
        ConversionReport.from_json(folder / REPORT_FILE)
    except ReportError as exc:
        raise OutputError(
            f"--report '{folder}' | is a folder that holds other files and no conversion report "
            f"({exc.problem.rstrip('.')}), expected a new or empty folder or one "
            "an earlier conversion wrote its report into.",
            hint="pass a new folder, e.g. --report conversion/.",
        ) from exc
