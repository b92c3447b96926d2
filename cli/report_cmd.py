"""``deploykit report``: show a saved benchmark report, check it against a baseline, or merge several."""

from __future__ import annotations

from pathlib import Path

import typer

from deploykit.bench.report import BenchmarkReport, merge_html
from deploykit.errors import UsageError
from deploykit.io import atomic_path, check_outputs

from .console import console


def report(
    reports: list[str] = typer.Argument(
        ..., help="REPORT.json [--baseline OLD.json], or: merge A.json B.json ... -o fleet.html"
    ),
    baseline: Path = typer.Option(None, "--baseline", help="An earlier report.json to check for regressions."),
    threshold: float = typer.Option(0.10, help="Allowed slowdown before it is a regression (0.10 = 10%)."),
    output: Path = typer.Option(None, "--output", "-o", readable=False, help="With merge: the HTML file to write."),
) -> None:
    """Show a saved report, check it against a baseline (exit 1 on regression), or merge several into HTML."""
    if reports[0] == "merge":
        if len(reports) < 2 or output is None:
            raise UsageError(
                "report merge | needs report files and --output.",
                hint="deploykit report merge jetson.json nuc.json -o fleet.html",
            )
        check_outputs({"--output": output}, inputs={path: path for path in reports[1:]})
        loaded = [BenchmarkReport.from_json(path) for path in reports[1:]]
        with atomic_path(output) as temporary:
            temporary.write_text(merge_html(loaded))
        console.print(f"merged {len(loaded)} reports into {output}")
        return
    if len(reports) != 1:
        raise UsageError(
            f"report | got {len(reports)} files; give one report (with --baseline) or 'merge' first.",
            hint="deploykit report out/report.json --baseline last_week.json",
        )
    current = BenchmarkReport.from_json(reports[0])
    if baseline is None:
        console.print(current.table())
        return
    if threshold < 0:
        raise UsageError(f"threshold {threshold} | cannot be negative.", hint="e.g. --threshold 0.1 for 10%.")
    findings = current.regressions(BenchmarkReport.from_json(baseline), threshold)
    for finding in findings:
        console.print(f"[red]regression[/]: {finding}")
    if findings:
        raise typer.Exit(1)
    console.print(f"no regression beyond {threshold:.0%} against {baseline}")
