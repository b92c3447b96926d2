"""A benchmark report as data: the model, the machine, the settings, one ``Row`` per configuration,
and what judging recorded in it (the recommendation, the Pareto front).

``to_dict()`` is ``docs/report-schema.json`` (``schema_version`` grows when a field changes
meaning), ``from_dict``/``from_json`` read it back validated, ``write`` saves it. Judging
(ranking, recommendation, Pareto front, regressions) is ``deploykit.bench.judging``; the views
(CSV, Markdown, HTML) are ``views``/``html`` and the report folder ``report_files``: they read
this module, which imports none of them.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from deploykit.bench.report_schema import validate_report
from deploykit.bench.rows import BenchSettings, ModelInfo, Recommendation, Row, accuracy_delta
from deploykit.document import JsonDocument
from deploykit.errors import ReportError

__all__ = ["BenchSettings", "BenchmarkReport", "ModelInfo", "Recommendation", "Row", "accuracy_delta"]

SCHEMA = "deploykit.bench"
SCHEMA_VERSION = 1

# p50 is the one latency headline (bench, optimize, --recheck, the HTML pages): the typical call,
# and the statistic whose bootstrap stays honest on a busy device, where a short round's p90 is a
# handful of calls the scheduler pre-empted. p90/p99 are reported beside it, never ranked on.
HEADLINE = {"singlestream": "p50_ms", "multistream": "p50_ms", "offline": "throughput_sps"}


@dataclass
class BenchmarkReport(JsonDocument):
    """A benchmark report: the model, the machine, the settings and one ``Row`` per configuration,
    with what judging recorded (``deploykit.bench.judging.judge`` sets the recommendation and the
    Pareto front). ``to_dict()`` is ``docs/report-schema.json``.

    Attributes:
        model: the benchmarked file (path, sha256, interface).
        settings: how it ran.
        device: the machine's fingerprint (CPU, flags, memory, GPUs, runtime versions).
        rows: one per configuration, in the order they ran.
        created: ISO 8601 UTC time the bench finished.
        notes: precisions not supported here, which oracle ran, budgets nothing met.
        recommendation: the configuration to deploy, or None when nothing was verified.
        pareto_front: the labels of the configurations no other beats on both the headline and
            the accuracy delta, fastest first.
    """

    KIND: ClassVar[str] = "report"
    HINT: ClassVar[str] = "pass a report.json written by deploykit bench."

    model: ModelInfo
    settings: BenchSettings
    device: dict[str, Any]
    rows: list[Row]
    created: str = field(default_factory=lambda: dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"))
    notes: list[str] = field(default_factory=list)
    recommendation: Recommendation | None = None
    pareto_front: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "schema_version": SCHEMA_VERSION,
            "created": self.created,
            "model": self.model.to_dict(),
            "settings": self.settings.to_dict(),
            "device": self.device,
            "rows": [row.to_dict() for row in self.rows],
            "notes": list(self.notes),
            "pareto_front": list(self.pareto_front),
            "recommendation": None if self.recommendation is None else self.recommendation.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str | os.PathLike[str] = "<report>") -> BenchmarkReport:
        """The report ``to_dict`` wrote, validated against the schema first.

        Raises:
            ReportError: not a deploykit bench report, a newer schema version, or a field that
                breaks the schema (the message names its JSON path).
        """
        file = Path(source)
        if not isinstance(data, Mapping) or data.get("schema") != SCHEMA:
            raise cls.invalid(file, "is not a deploykit bench report.")
        version = data.get("schema_version")
        if not isinstance(version, int) or isinstance(version, bool):
            raise cls.invalid(file, f"does not follow the report schema: schema_version is {version!r}, expected 1.")
        if version > SCHEMA_VERSION:
            raise ReportError(
                f"report '{file}' | has schema version {version}, this deploykit reads up to {SCHEMA_VERSION}.",
                hint="upgrade deploykit to read reports from newer versions.",
            )
        validate_report(dict(data), file)
        recommendation = data.get("recommendation")
        return cls(
            model=ModelInfo.from_dict(data["model"]),
            settings=BenchSettings.from_dict(data["settings"]),
            device=dict(data["device"]),
            rows=[Row.from_dict(row) for row in data["rows"]],
            created=data["created"],
            notes=list(data.get("notes") or []),
            recommendation=None if recommendation is None else Recommendation.from_dict(recommendation),
            pareto_front=list(data.get("pareto_front") or []),
        )

    def __repr__(self) -> str:
        best = self.recommendation.label if self.recommendation else None
        return (
            f"BenchmarkReport({Path(self.model.path).name!r}, {len(self.rows)} rows, "
            f"{len(self.ok_rows())} ok, recommended {best!r})"
        )

    @property
    def headline(self) -> str:
        """The figure configurations are ranked by: ``p50_ms``, or ``throughput_sps`` offline."""
        return HEADLINE[self.settings.scenario]

    def headline_value(self, row: Row) -> float:
        """``row``'s headline figure (an ``ok`` row)."""
        if self.headline == "throughput_sps":
            return float(row.throughput_sps or 0.0)
        return row.latency_ms(self.headline)

    def row(self, label: str) -> Row | None:
        """The row of the configuration labelled ``label`` (``openvino:CPU b1 bf16``), if any."""
        return next((r for r in self.rows if r.label == label), None)

    def ok_rows(self) -> list[Row]:
        """The rows that ran (status ``ok``), in order."""
        return [r for r in self.rows if r.ok]
