"""The merged report of a fleet benchmark: one bench report per device, a device × configuration
table of headline figures with each device's recommendation, and failed columns with their reasons.

Per-device reports keep the ordinary bench schema (``deploykit.bench``), so ``deploykit report``
and ``report merge`` read them; the fleet document (``deploykit.fleet``) wraps them.
"""

from __future__ import annotations

import datetime as dt
import html
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deploykit.bench.report import BenchmarkReport, merge_html
from deploykit.bench.rows import Recommendation, Row
from deploykit.errors import ReportError
from deploykit.io import file_sha256, written

SCHEMA_VERSION = 1


@dataclass
class DeviceOutcome:
    """One device's part of a fleet run: its bench report, or why there is none.

    Attributes:
        name: the device name (its ``deploykit-device:NAME`` Ray resource).
        status: ``ok``, or ``failed`` with ``error`` saying why (no node, timeout, crash).
        node: the Ray node id that ran it.
        report: the device's bench report (``ok`` devices).
        elapsed_s: seconds from the fleet's start until this device finished.
    """

    name: str
    status: str  # "ok" or "failed"
    error: str | None
    node: str | None = None
    report: BenchmarkReport | None = None
    elapsed_s: float | None = None

    def to_dict(self) -> dict[str, Any]:
        report = None if self.report is None else self.report.to_dict()
        return {"name": self.name, "status": self.status, "error": self.error, "node": self.node, "report": report,
                "elapsed_s": self.elapsed_s}  # fmt: skip

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DeviceOutcome:
        report = data.get("report")
        return cls(data["name"], data["status"], data.get("error"), data.get("node"),
                   None if report is None else BenchmarkReport.from_dict(report, f"fleet device {data['name']}"),
                   data.get("elapsed_s"))  # fmt: skip


def _cell(result: BenchmarkReport, row: Row, best: Row | None) -> str:
    if not row.ok:
        return f"failed: {row.error}"
    unit = "samples/s" if result.headline == "throughput_sps" else "ms"
    verdict = row.verdict
    bad = verdict is not None and verdict.blocking
    mark = " ★" if row is best else f" ({verdict.label})" if bad and verdict else ""
    return f"{result.headline_value(row):.3f} {unit} {row.precision}{mark}"


@dataclass
class FleetReport:
    """A fleet benchmark: one outcome per device (its bench report, or why it failed); methods
    render the configuration × device matrix. ``to_dict()`` is the ``deploykit.fleet`` document.

    Attributes:
        model_path, model_sha256: the benchmarked file on the machine that started the fleet.
        settings: the bench settings sent to every device, and ``device_timeout_s``.
        devices: one outcome per device, in the order asked for.
        created: ISO 8601 UTC time the fleet finished.
    """

    model_path: str
    model_sha256: str
    settings: dict[str, Any]
    devices: list[DeviceOutcome]
    created: str = field(default_factory=lambda: dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"))

    @classmethod
    def build(
        cls, model: Path, outcomes: list[DeviceOutcome], settings: dict[str, Any], device_timeout_s: float
    ) -> FleetReport:
        return cls(
            str(model),
            file_sha256(model),
            {**json.loads(json.dumps(settings, default=str)), "device_timeout_s": device_timeout_s},
            outcomes,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": "deploykit.fleet",
            "schema_version": SCHEMA_VERSION,
            "created": self.created,
            "model": {"path": self.model_path, "sha256": self.model_sha256},
            "settings": self.settings,
            "devices": [device.to_dict() for device in self.devices],
        }

    @classmethod
    def from_json(cls, path: str | os.PathLike[str]) -> FleetReport:
        """Read a ``fleet.json``.

        Raises:
            ReportError: not readable, not a fleet report, or a device report that breaks the schema.
        """
        try:
            data = json.loads(Path(path).read_text())
        except (OSError, ValueError) as exc:
            raise ReportError(f"fleet report '{path}' | cannot be read: {exc}.",
                              hint="pass a fleet.json written by deploykit bench --fleet.") from exc  # fmt: skip
        if not isinstance(data, dict) or data.get("schema") != "deploykit.fleet":
            raise ReportError(f"fleet report '{path}' | is not a deploykit fleet report.",
                              hint="pass a fleet.json written by deploykit bench --fleet.")  # fmt: skip
        return cls(data["model"]["path"], data["model"]["sha256"], dict(data.get("settings") or {}),
                   [DeviceOutcome.from_dict(d) for d in data["devices"]], data["created"])  # fmt: skip

    def reports(self) -> dict[str, BenchmarkReport]:
        """Device name → its bench report, for the devices that finished."""
        return {d.name: d.report for d in self.devices if d.status == "ok" and d.report is not None}

    def recommendations(self) -> dict[str, Recommendation | None]:
        """Device name → the recommended configuration there (None: failed, or nothing was verified)."""
        return {d.name: None if d.report is None else d.report.recommendation for d in self.devices}

    def matrix(self) -> list[dict[str, str]]:
        """One row per configuration, one column per device: the headline figure, or why it failed."""
        reports = self.reports()
        labels: list[str] = []
        for result in reports.values():
            labels += [r.label for r in result.rows if r.label not in labels]
        table = []
        for label in labels or ["(every configuration)"]:
            line = {"configuration": label}
            for device in self.devices:
                if device.name not in reports:
                    line[device.name] = f"failed: {device.error}"
                    continue
                result = reports[device.name]
                row = result.row(label)
                line[device.name] = "-" if row is None else _cell(result, row, result.best())
            table.append(line)
        return table

    # --- writing -------------------------------------------------------------------------
    def to_json(self, path: str | os.PathLike[str] | None = None) -> str:
        text = json.dumps(self.to_dict(), indent=2, default=str)
        return written(text, path)

    def to_markdown(self, path: str | os.PathLike[str] | None = None) -> str:
        rows = self.matrix()
        header = list(rows[0])
        lines = [f"# deploykit fleet bench: {Path(self.model_path).name}", ""]
        lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(r[h].replace("|", "/") for h in header) + " |" for r in rows]
        lines += ["", "## Recommendation per device", ""]
        for name, recommendation in self.recommendations().items():
            text = f"{recommendation.label}: `{recommendation.python}`" if recommendation else "none"
            lines.append(f"- **{name}**: {text}")
        text = "\n".join(lines) + "\n"
        return written(text, path)

    def to_html(self, path: str | os.PathLike[str] | None = None) -> str:
        """The device sections side by side (as ``report merge``), after the fleet table and a chart."""
        rows = self.matrix()
        e = html.escape
        head = "".join(f"<th>{e(h)}</th>" for h in rows[0])
        body = "".join(
            "<tr>" + "".join(f'<td{" class=fail" if v.startswith("failed") else ""}>{e(v)}</td>' for v in r.values())
            + "</tr>" for r in rows
        )  # fmt: skip
        recommendations = "".join(
            f"<li><b>{e(name)}</b>: " + (f"{e(rec.label)} — <code>{e(rec.python)}</code>" if rec else "none") + "</li>"
            for name, rec in self.recommendations().items()
        )
        fleet = (f'<section class="fleet"><h2>Fleet: configuration × device</h2><table><tr>{head}</tr>{body}</table>'
                 f"<h3>Headline per device</h3>{self._chart()}"
                 f"<h3>Recommendation per device</h3><ul>{recommendations}</ul></section>")  # fmt: skip
        reports = list(self.reports().values())
        if reports:
            page = merge_html(reports).replace('<div class="devices">', fleet + '<div class="devices">', 1)
        else:
            head = "<head><meta charset='utf-8'><title>deploykit fleet</title></head>"
            page = f"<!DOCTYPE html><html lang='en'>{head}<body>{fleet}</body></html>"
        return written(page, path)

    def _chart(self) -> str:
        """Grouped bars: for each configuration, one bar per device (its headline figure)."""
        reports = self.reports()
        bars = []
        for label in [r["configuration"] for r in self.matrix()]:
            for name, result in reports.items():
                row = result.row(label)
                if row is not None and row.ok:
                    bars.append((label, name, result.headline_value(row), result.headline))
        if not bars:
            return '<p class="note">no device finished</p>'
        top = max(b[2] for b in bars) or 1.0
        names = sorted(reports)
        colours = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"]
        parts = [
            f'<svg class="plot" role="img" aria-label="headline per device" width="760" height="{16 * len(bars) + 30}">'
        ]
        for i, (label, name, value, headline) in enumerate(bars):
            y, width = 8 + 16 * i, max(1.0, 380 * value / top)
            colour = colours[names.index(name) % len(colours)]
            parts.append(
                f'<text x="4" y="{y + 11}" font-size="11">{html.escape(label)} @ {html.escape(name)}</text>'
                f'<rect x="300" y="{y}" width="{width:.1f}" height="13" fill="{colour}"/>'
                f'<text x="{304 + width:.1f}" y="{y + 11}" font-size="10">{value:.3f} {headline}</text>'
            )
        return "".join(parts) + "</svg>"

    def write_all(self, directory: str | os.PathLike[str]) -> list[Path]:
        """fleet.json/.md/.html, and each finished device's report.* in a sub-folder named after it."""
        folder = Path(directory)
        folder.mkdir(parents=True, exist_ok=True)
        paths = [folder / f"fleet.{ext}" for ext in ("json", "md", "html")]
        self.to_json(paths[0])
        self.to_markdown(paths[1])
        self.to_html(paths[2])
        for name, result in self.reports().items():
            paths += result.write_all(folder / re.sub(r"[^A-Za-z0-9._-]+", "_", name))
        return paths

    def table(self) -> Any:
        """A rich Table of ``matrix()``."""
        from rich.markup import escape
        from rich.table import Table

        rows = self.matrix()
        table = Table(title=f"fleet: {Path(self.model_path).name} (★ = recommended on that device)")
        for column in rows[0]:
            table.add_column(column, overflow="fold")
        for row in rows:
            table.add_row(*(escape(v) for v in row.values()))
        return table


FleetResult = FleetReport
"""The earlier name of ``FleetReport`` (whose ``data`` dict is now ``to_dict()``), kept for existing code."""
