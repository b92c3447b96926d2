"""How a benchmark report is printed: the table, then what a user must not miss (failures,
verdicts that are not a pass, warnings, notes, the recommendation). ``bench`` and ``report`` share it."""

from __future__ import annotations

from deploykit.bench.report import BenchmarkReport

from .console import console, err_console


def print_bench_report(result: BenchmarkReport) -> None:
    console.print(result.table())
    for row in result.rows:
        for warning in row.warnings:
            err_console.print(f"warning: {row.label}: {warning}")
        if row.stages:
            stages = row.stages
            split = f"pre {stages['pre_p50_ms']:.1f} ms, inference {stages['infer_p50_ms']:.1f} ms"
            console.print(f"{row.label}: {split}, post {stages['post_p50_ms']:.1f} ms (p50)")
        if not row.ok:
            err_console.print(f"{row.label}: error — {row.error}", soft_wrap=True)
        if row.verdict is not None and row.verdict.status != "pass":
            err_console.print(f"{row.label}: {row.verdict.label} — {row.verdict.reason}", soft_wrap=True)
        if row.verdict is not None and row.verdict.task_note:
            err_console.print(f"{row.label}: {row.verdict.task_note}", soft_wrap=True)
    for note in result.notes:
        err_console.print(f"note: {note}", soft_wrap=True)
    if result.recommendation:
        console.print(f"recommended: {result.recommendation.python} ({result.recommendation.why})")
