"""The text views of a benchmark report: the flat CSV, the summary rows (the table Markdown, HTML
and the CLI's terminal table show) and the Markdown page. Pure functions of a ``BenchmarkReport``
and of what ``judging`` says about it; nothing imports this module back but other views."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deploykit.bench import judging
from deploykit.bench.rows import short_error
from deploykit.io import one_line

if TYPE_CHECKING:
    from deploykit.bench.report import BenchmarkReport
    from deploykit.bench.rows import Row

LATENCY_KEYS = ("min_ms", "mean_ms", "std_ms", "cov", "p50_ms", "p90_ms", "p95_ms", "p99_ms", "p999_ms", "max_ms")
CSV_COLUMNS = [
    "label",
    "backend",
    "device",
    "precision",
    "batch",
    "threads",
    "scenario",
    "streams",
    "status",
    "load_ms",
    "first_inference_ms",
    *LATENCY_KEYS,
    "throughput_sps",
    "peak_rss_bytes",
    "energy_j_per_inference",
    "cost_per_million",
    "verdict",
    "accuracy_delta",
    "max_abs_error",
    "error",
    "hint",
]


def _flat(row: Row) -> dict[str, Any]:
    latency = row.latency.to_dict() if row.latency else {}
    return {
        "label": row.label,
        "backend": row.config.backend,
        "device": row.device,
        "precision": row.session.precision_label if row.session else None,
        "batch": row.config.batch,
        "threads": row.config.threads,
        "scenario": row.config.scenario,
        "streams": row.config.streams,
        "status": row.status,
        "load_ms": row.load_ms,
        "first_inference_ms": row.first_inference_ms,
        **{k: latency.get(k) for k in LATENCY_KEYS},
        "throughput_sps": row.throughput_sps,
        "peak_rss_bytes": row.peak_rss_bytes,
        "energy_j_per_inference": row.energy_j_per_inference,
        "cost_per_million": row.cost_per_million,
        "verdict": None if row.verdict is None else row.verdict.label,
        "accuracy_delta": row.accuracy_delta,
        "max_abs_error": row.max_abs_error,
        "error": row.error,
        "hint": row.hint,
    }


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}" if abs(value) < 1e6 else f"{value:.3g}"
    return str(value)


def csv_text(report: BenchmarkReport) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_COLUMNS)
    writer.writeheader()
    for row in report.rows:
        writer.writerow(_flat(row))
    return buffer.getvalue()


def summary_rows(report: BenchmarkReport) -> list[dict[str, str]]:
    """Rows as the table, Markdown and HTML show them: headline ratio vs the fastest."""
    fastest = judging.fastest(report)
    best = judging.best(report)
    shown = []
    for row in report.rows:
        flat = _flat(row)
        ratio = "-"
        if row.ok and fastest is not None:
            ours, theirs = report.headline_value(row), report.headline_value(fastest)
            ratio = f"{theirs / ours:.2f}x" if report.headline == "throughput_sps" else f"{ours / theirs:.2f}x"
        shown.append(
            {
                "configuration": row.label + (" ★" if row is best else ""),
                "device": _fmt(flat["device"]),
                "precision": _fmt(flat["precision"]),
                "load ms": _fmt(flat["load_ms"], 1),
                "first ms": _fmt(flat["first_inference_ms"], 2),
                "p50 ms": _fmt(flat["p50_ms"]),
                "p90 ms": _fmt(flat["p90_ms"]),
                "p99 ms": _fmt(flat["p99_ms"]),
                "CoV": _fmt(flat["cov"], 2),
                "samples/s": _fmt(flat["throughput_sps"], 1),
                "peak RSS MiB": _fmt(None if row.peak_rss_bytes is None else row.peak_rss_bytes / 2**20, 0),
                "vs fastest": ratio,
                "acc. delta": "-" if row.accuracy_delta is None else f"{row.accuracy_delta:.1%}",
                "verdict": flat["verdict"] or ("-" if row.ok else f"error: {short_error(row.error)}"),
                **({"$/1M": _fmt(row.cost_per_million, 4)} if report.settings.cost_per_hour else {}),
            }
        )
    return shown


def markdown_text(report: BenchmarkReport) -> str:
    rows = summary_rows(report)
    cpu = report.device["cpu"]
    lines = [
        f"# deploykit bench: {one_line(Path(report.model.path).name)}",
        "",
        f"{cpu['model']} ({cpu['logical_cores']} logical cores, flags {', '.join(cpu['flags']) or '-'}), "
        f"{report.device['os']}, Python {report.device['python']}; "
        f"scenario {report.settings.scenario}, headline {report.headline}; {report.created}",
        "",
    ]
    if rows:
        header = list(rows[0])
        lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(one_line(r[h], None).replace("|", "/") for h in header) + " |" for r in rows]
    recommendation = report.recommendation
    if recommendation:
        lines += [
            "",
            f"**Recommendation**: {recommendation.label} — {recommendation.why}.",
            "",
            f"`{recommendation.command}`",
            "",
            f"`{recommendation.python}`",
        ]
    return "\n".join(lines) + "\n"
