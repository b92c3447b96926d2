"""The views of a fleet report: the configuration × device matrix of headline figures, its
Markdown and HTML pages (the HTML after the devices' bench sections, side by side), and the
report folder (fleet.json/.md/.html and each device's bench report folder). Reads the data
(``fleet_report``) and the bench views; nothing imports this module back but the CLI.
"""

from __future__ import annotations

import html
import os
import re
from pathlib import Path

from deploykit.bench import judging, plots
from deploykit.bench.html import render_html
from deploykit.bench.report import BenchmarkReport
from deploykit.bench.report_files import write_report
from deploykit.bench.rows import Row
from deploykit.distributed.fleet_report import FleetReport
from deploykit.io import written


def _cell(result: BenchmarkReport, row: Row, best: Row | None) -> str:
    if not row.ok:
        return f"failed: {row.error}"
    unit = "samples/s" if result.headline == "throughput_sps" else "ms"
    verdict = row.verdict
    bad = verdict is not None and verdict.blocking
    mark = " ★" if row is best else f" ({verdict.label})" if bad and verdict else ""
    return f"{result.headline_value(row):.3f} {unit} {row.precision}{mark}"


def matrix(fleet: FleetReport) -> list[dict[str, str]]:
    """One row per configuration, one column per device: the headline figure, or why it failed."""
    reports = fleet.reports()
    labels: list[str] = []
    for result in reports.values():
        labels += [r.label for r in result.rows if r.label not in labels]
    table = []
    for label in labels or ["(every configuration)"]:
        line = {"configuration": label}
        for device in fleet.devices:
            if device.name not in reports:
                line[device.name] = f"failed: {device.error}"
                continue
            result = reports[device.name]
            row = result.row(label)
            line[device.name] = "-" if row is None else _cell(result, row, judging.best(result))
        table.append(line)
    return table


def markdown_text(fleet: FleetReport) -> str:
    rows = matrix(fleet)
    header = list(rows[0])
    lines = [f"# deploykit fleet bench: {Path(fleet.model_path).name}", ""]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r[h].replace("|", "/") for h in header) + " |" for r in rows]
    lines += ["", "## Recommendation per device", ""]
    for name, recommendation in fleet.recommendations().items():
        text = f"{recommendation.label}: `{recommendation.python}`" if recommendation else "none"
        lines.append(f"- **{name}**: {text}")
    return "\n".join(lines) + "\n"


def _chart(fleet: FleetReport) -> str:
    """Grouped bars: for each configuration, one bar per device (its headline figure)."""
    reports = fleet.reports()
    groups, headline = [], "p90_ms"
    for label in [r["configuration"] for r in matrix(fleet)]:
        values = []
        for name, result in sorted(reports.items()):
            row = result.row(label)
            if row is not None and row.ok:
                values.append((name, result.headline_value(row)))
                headline = result.headline
        if values:
            groups.append((label, values))
    if not groups:
        return '<p class="note">no device finished</p>'
    unit = "samples/s" if headline == "throughput_sps" else "ms"
    return plots.bars(groups, f"{headline} ({unit})", "headline per configuration and device")


def html_text(fleet: FleetReport) -> str:
    """The device sections side by side (as ``report merge``), after the fleet table and a chart."""
    rows = matrix(fleet)
    e = html.escape
    head = "".join(f"<th>{e(h)}</th>" for h in rows[0])
    body = "".join(
        "<tr>"
        + "".join(f"<td{' class=fail' if v.startswith('failed') else ''}>{e(v)}</td>" for v in r.values())
        + "</tr>"
        for r in rows
    )
    recommendations = "".join(
        f"<li><b>{e(name)}</b>: " + (f"{e(rec.label)} — <code>{e(rec.python)}</code>" if rec else "none") + "</li>"
        for name, rec in fleet.recommendations().items()
    )
    section = (
        f'<section class="fleet"><h2>Fleet: configuration × device</h2><table><tr>{head}</tr>{body}</table>'
        f"<h3>Headline per device</h3>{_chart(fleet)}"
        f"<h3>Recommendation per device</h3><ul>{recommendations}</ul></section>"
    )
    reports = list(fleet.reports().values())
    if reports:
        return render_html(reports).replace('<div class="devices">', section + '<div class="devices">', 1)
    head = "<head><meta charset='utf-8'><title>deploykit fleet</title></head>"
    return f"<!DOCTYPE html><html lang='en'>{head}<body>{section}</body></html>"


def write_fleet_report(fleet: FleetReport, directory: str | os.PathLike[str]) -> list[Path]:
    """fleet.json/.md/.html, and each finished device's report.* in a sub-folder named after it."""
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / f"fleet.{ext}" for ext in ("json", "md", "html")]
    fleet.write(paths[0])
    written(markdown_text(fleet), paths[1])
    written(html_text(fleet), paths[2])
    for name, result in fleet.reports().items():
        paths += write_report(result, folder / re.sub(r"[^A-Za-z0-9._-]+", "_", name))
    return paths
