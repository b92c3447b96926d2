"""``deploykit report``: show a saved benchmark report, check it against a baseline, or merge several."""

from __future__ import annotations

from pathlib import Path

import typer

from deploykit.bench import judging
from deploykit.bench.html import render_html
from deploykit.bench.report import BenchmarkReport
from deploykit.errors import UsageError
from deploykit.io import atomic_path, check_outputs
from deploykit.validation import check_number

from . import options as opt
from .bench_view import print_bench_report
from .console import console, err_console
from .paths import file_out, path_in


def report(
    reports: list[str] = typer.Argument(
        ..., help="REPORT.json [--baseline OLD.json], or: merge A.json B.json ... -o fleet.html"
    ),
    baseline: Path = typer.Option(
        None, "--baseline", parser=path_in, help="An earlier report.json to check for regressions."
    ),
    threshold: float = typer.Option(
        0.10, parser=opt.Number(low=0), help="Allowed slowdown before it is a regression (0.10 = 10%)."
    ),
    output: Path = typer.Option(
        None, "--output", "-o", readable=False, parser=file_out, help="With merge: the HTML file to write."
    ),
) -> None:
    """Show a saved report, check it against a baseline (exit 1 on regression), or merge several into HTML."""
    if reports[0] == "merge":
        if baseline is not None:
            raise UsageError(
                "--baseline | checks one report; merge only puts reports side by side.",
                hint="deploykit report new.json --baseline old.json",
            )
        if len(reports) < 2 or output is None:
            raise UsageError(
                "report merge | needs report files and --output.",
                hint="deploykit report merge jetson.json nuc.json -o fleet.html",
            )
        check_outputs({"--output": output}, inputs={path: path for path in reports[1:]})
        if output.suffix.lower() not in (".html", ".htm"):
            raise UsageError(
                f"--output '{output}' | merge writes one HTML page, expected a .html file name.",
                hint="e.g. -o fleet.html.",
            )
        loaded = [BenchmarkReport.from_json(path) for path in reports[1:]]
        with atomic_path(output) as temporary:
            temporary.write_text(render_html(loaded))
        console.print(f"merged {len(loaded)} report{'s' if len(loaded) != 1 else ''} into {output}")
        return
    if output is not None:
        raise UsageError(
            "--output | is for 'report merge'; showing one report writes nothing.",
            hint="deploykit report merge a.json b.json -o fleet.html",
        )
    if len(reports) != 1:
        raise UsageError(
            f"report | got {len(reports)} files; give one report (with --baseline) or 'merge' first.",
            hint="deploykit report out/report.json --baseline last_week.json",
        )
    current = BenchmarkReport.from_json(_report_file(reports[0]))
    if baseline is None:
        print_bench_report(current)
        return
    check_number(
        "--threshold", threshold, low=0.0, hint="an allowed slowdown as a fraction, e.g. --threshold 0.1 for 10%."
    )
    before = BenchmarkReport.from_json(_report_file(baseline))
    for note in judging.differences(current, before):
        err_console.print(f"note: {note}", soft_wrap=True)
    findings = judging.regressions(current, before, threshold)
    for finding in findings:
        console.print(f"[red]regression[/]: {finding}")
    if findings:
        raise typer.Exit(1)
    console.print(f"no regression beyond {threshold:.0%} against {baseline}")


def _report_file(path: str | Path) -> Path:
    """A report path; a folder written by ``bench --report`` stands for its report.json."""
    file = Path(path)
    if file.is_dir() and (file / "report.json").is_file():
        return file / "report.json"
    return file
