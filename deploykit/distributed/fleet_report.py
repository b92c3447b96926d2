"""The merged report of a fleet benchmark: one bench report per device, a device × configuration
table of headline figures with each device's recommendation, and failed columns with their reasons.

Per-device reports keep the ordinary bench schema (``deploykit.bench``), so ``deploykit report``
and ``report merge`` read them; the fleet document (``deploykit.fleet``) wraps them.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import html
import json
import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from deploykit.bench.report import BenchmarkResult, merge_html
from deploykit.errors import ReportError
from deploykit.io import atomic_path

SCHEMA_VERSION = 1


@dataclass
class DeviceOutcome:
    """One device's part of a fleet run: its bench report, or why there is none."""

    name: str
    status: str  # "ok" or "failed"
    error: str | None
    node: str | None = None
    report: dict[str, Any] | None = None
    elapsed_s: float | None = None


def _cell(result: BenchmarkResult, row: dict[str, Any], best: dict[str, Any] | None) -> str:
    if row["status"] != "ok":
        return f"failed: {row['error']}"
    unit = "samples/s" if result.headline == "throughput_sps" else "ms"
    value = row["throughput_sps"] if result.headline == "throughput_sps" else row["latency"][result.headline]
    verdict = row.get("verdict") or {}
    bad = verdict.get("status") in ("fail", "error", "degenerate") or verdict.get("agreement") is False
    mark = " ★" if row is best else f" ({verdict['label']})" if bad else ""
    return f"{value:.3f} {unit} {row['session']['precision']}{mark}"


def _written(text: str, path: str | os.PathLike[str] | None) -> str:
    """``text``, also written atomically to ``path`` when one is given."""
    if path is not None:
        with atomic_path(path) as temporary:
            temporary.write_text(text)
    return text


class FleetResult:
    """A fleet benchmark: ``data`` is the JSON document; methods render it."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data

    @classmethod
    def build(
        cls, model: Path, outcomes: list[DeviceOutcome], settings: dict[str, Any], device_timeout_s: float
    ) -> FleetResult:
        return cls(
            {
                "schema": "deploykit.fleet",
                "schema_version": SCHEMA_VERSION,
                "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                "model": {"path": str(model), "sha256": hashlib.sha256(model.read_bytes()).hexdigest()},
                "settings": {**json.loads(json.dumps(settings, default=str)), "device_timeout_s": device_timeout_s},
                "devices": [asdict(outcome) for outcome in outcomes],
            }
        )

    @classmethod
    def from_json(cls, path: str | os.PathLike[str]) -> FleetResult:
        try:
            data = json.loads(Path(path).read_text())
        except (OSError, ValueError) as exc:
            raise ReportError(f"fleet report '{path}' | cannot be read: {exc}.",
                              hint="pass a fleet.json written by deploykit bench --fleet.") from exc  # fmt: skip
        if not isinstance(data, dict) or data.get("schema") != "deploykit.fleet":
            raise ReportError(f"fleet report '{path}' | is not a deploykit fleet report.",
                              hint="pass a fleet.json written by deploykit bench --fleet.")  # fmt: skip
        return cls(data)

    @property
    def devices(self) -> list[dict[str, Any]]:
        devices: list[dict[str, Any]] = self.data["devices"]
        return devices

    def reports(self) -> dict[str, BenchmarkResult]:
        """Device name → its bench report, for the devices that finished."""
        return {d["name"]: BenchmarkResult(d["report"]) for d in self.devices if d["status"] == "ok"}

    def recommendations(self) -> dict[str, dict[str, Any] | None]:
        """Device name → the recommended configuration there (None: failed, or nothing was verified)."""
        return {d["name"]: (d["report"] or {}).get("recommendation") for d in self.devices}

    def matrix(self) -> list[dict[str, str]]:
        """One row per configuration, one column per device: the headline figure, or why it failed."""
        reports = self.reports()
        labels: list[str] = []
        for result in reports.values():
            labels += [r["config"]["label"] for r in result.rows if r["config"]["label"] not in labels]
        table = []
        for label in labels or ["(every configuration)"]:
            line = {"configuration": label}
            for device in self.devices:
                name = device["name"]
                if device["status"] != "ok":
                    line[name] = f"failed: {device['error']}"
                    continue
                result = reports[name]
                row = next((r for r in result.rows if r["config"]["label"] == label), None)
                line[name] = "-" if row is None else _cell(result, row, result.best())
            table.append(line)
        return table

    # --- writing -------------------------------------------------------------------------
    def to_json(self, path: str | os.PathLike[str] | None = None) -> str:
        text = json.dumps(self.data, indent=2, default=str)
        return _written(text, path)

    def to_markdown(self, path: str | os.PathLike[str] | None = None) -> str:
        rows = self.matrix()
        header = list(rows[0])
        lines = [f"# deploykit fleet bench: {Path(self.data['model']['path']).name}", ""]
        lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(r[h].replace("|", "/") for h in header) + " |" for r in rows]
        lines += ["", "## Recommendation per device", ""]
        for name, recommendation in self.recommendations().items():
            text = f"{recommendation['label']}: `{recommendation['python']}`" if recommendation else "none"
            lines.append(f"- **{name}**: {text}")
        text = "\n".join(lines) + "\n"
        return _written(text, path)

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
            f"<li><b>{e(name)}</b>: "
            + (f"{e(rec['label'])} — <code>{e(rec['python'])}</code>" if rec else "none")
            + "</li>"
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
        return _written(page, path)

    def _chart(self) -> str:
        """Grouped bars: for each configuration, one bar per device (its headline figure)."""
        reports = self.reports()
        bars = []
        for label in [r["configuration"] for r in self.matrix()]:
            for name, result in reports.items():
                row = next((r for r in result.ok_rows() if r["config"]["label"] == label), None)
                if row is not None:
                    value = (
                        row["throughput_sps"]
                        if result.headline == "throughput_sps"
                        else row["latency"][result.headline]
                    )
                    bars.append((label, name, float(value), result.headline))
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
        table = Table(title=f"fleet: {Path(self.data['model']['path']).name} (★ = recommended on that device)")
        for column in rows[0]:
            table.add_column(column, overflow="fold")
        for row in rows:
            table.add_row(*(escape(v) for v in row.values()))
        return table
