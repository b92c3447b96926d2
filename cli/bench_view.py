"""How a benchmark report is printed: the table, then what a user must not miss (failures,
verdicts that are not a pass, warnings, notes, the recommendation). ``bench``, ``report``,
``demo`` and ``fleet`` share it; the terminal tables (rich) live here, the library has none."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from rich.markup import escape
from rich.table import Table

from deploykit.bench.report import BenchmarkReport
from deploykit.bench.views import summary_rows
from deploykit.io import one_line

from .console import console, err_console, plain

if TYPE_CHECKING:
    from deploykit.distributed.fleet_report import FleetReport


def _table(title: str, rows: list[dict[str, str]], empty: str) -> Table:
    table = Table(title=title)
    for column in rows[0] if rows else [empty]:
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*(escape(one_line(value, None)) for value in row.values()))
    return table


def bench_table(result: BenchmarkReport) -> Table:
    """The summary rows of a bench report (``views.summary_rows``), the recommended one starred."""
    title = f"{plain(Path(result.model.path).name)} — headline {result.headline} (★ = recommended)"
    return _table(title, summary_rows(result), "configuration")


def fleet_table(fleet: FleetReport) -> Table:
    """The configuration × device matrix of a fleet report."""
    from deploykit.distributed.fleet_views import matrix

    title = f"fleet: {plain(Path(fleet.model_path).name)} (★ = recommended on that device)"
    return _table(title, matrix(fleet), "configuration")


def print_bench_report(result: BenchmarkReport) -> None:
    console.print(bench_table(result))
    for row in result.rows:
        for warning in row.warnings:
            err_console.print(f"warning: {row.label}: {warning}")
        if row.stages:
            stages = row.stages
            split = f"pre {stages['pre_p50_ms']:.1f} ms, inference {stages['infer_p50_ms']:.1f} ms"
            console.print(f"{row.label}: {split}, post {stages['post_p50_ms']:.1f} ms (p50)")
        if not row.ok:
            err_console.print(f"{row.label}: error — {row.explanation}", soft_wrap=True)
        if row.verdict is not None and row.verdict.status != "pass":
            err_console.print(f"{row.label}: {row.verdict.label} — {row.verdict.explanation}", soft_wrap=True)
        if row.verdict is not None and row.verdict.task_note:
            err_console.print(f"{row.label}: {row.verdict.task_note}", soft_wrap=True)
    for note in result.notes:
        err_console.print(f"note: {note}", soft_wrap=True)
    if result.recommendation:
        console.print(f"recommended: {escape(result.recommendation.python)} ({escape(result.recommendation.why)})")
