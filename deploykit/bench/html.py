"""A single self-contained HTML page for one or several benchmark reports.

Plots are matplotlib's inline SVG (``deploykit.bench.plots``; no scripts, no network): latency
distribution per configuration, p50/p99 bars, throughput against batch, latency against threads
and the Pareto front of latency against accuracy.
"""

from __future__ import annotations

import html
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deploykit.bench import judging, plots, views

if TYPE_CHECKING:
    from deploykit.bench.report import BenchmarkReport
    from deploykit.bench.rows import Row

PAGE_STYLE = """
body{font-family:system-ui,sans-serif;margin:1.5rem;color:#222}
h1{font-size:1.4rem}h2{font-size:1.15rem;margin-top:1.6rem}
table{border-collapse:collapse;font-size:.85rem;margin:.6rem 0}
td,th{border:1px solid #ccc;padding:.25rem .5rem;text-align:right}th{background:#f3f3f3}
td:first-child,th:first-child{text-align:left}
.devices{display:flex;flex-wrap:wrap;gap:2rem}.device{flex:1 1 45rem;min-width:30rem;overflow-x:auto}
.fail{color:#b00}.pass{color:#070}.note{color:#666;font-size:.85rem}
svg.plot{background:#fff;border:1px solid #eee;margin:.3rem 0;max-width:100%;height:auto}
table.key{font-size:.75rem}
"""


def _e(value: Any) -> str:
    return html.escape(str(value))


def _bars(rows: list[Row]) -> str:
    """Grouped horizontal bars: p50 and p99 per configuration."""
    ok = [r for r in rows if r.ok]
    if not ok:
        return '<p class="note">no successful configuration to plot</p>'
    groups = [(r.label, [(key, r.latency_ms(key)) for key in ("p50_ms", "p99_ms")]) for r in ok]
    return plots.bars(groups, "latency (ms)", "p50 and p99 latency per configuration")


def _histograms(rows: list[Row]) -> str:
    """One small histogram per configuration: the shape of its latency distribution."""
    cells = []
    for row in rows:
        hist = row.latency_histogram
        if not row.ok or not hist:
            continue
        plot = plots.histogram(
            hist.counts, hist.edges_ms, "latency (ms)", "iterations", f"latency distribution of {row.label}"
        )
        cells.append(
            f'<figure style="display:inline-block;margin:.2rem">{plot}'
            f'<figcaption class="note">{_e(row.label)}</figcaption></figure>'
        )
    return "".join(cells) or '<p class="note">no latency samples</p>'


def _sweeps(rows: list[Row]) -> str:
    ok = [r for r in rows if r.ok]
    by_batch: dict[str, list[tuple[float, float]]] = defaultdict(list)
    by_threads: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for row in ok:
        config = row.config
        target = f"{config.backend}:{row.device}"
        by_batch[f"{target} t{config.threads or 'default'}"].append((config.batch, float(row.throughput_sps or 0)))
        if config.threads:
            by_threads[f"{target} b{config.batch}"].append((config.threads, row.latency_ms("p50_ms")))
    out = []
    if len({x for values in by_batch.values() for x, _ in values}) > 1:
        plot = plots.lines(by_batch, "batch size", "throughput (samples/s)", "throughput against batch size")
        out.append("<h3>Throughput against batch</h3>" + plot)
    else:
        out.append('<p class="note">one batch size measured: pass --batch 1,4,8 for a throughput curve</p>')
    if len({x for values in by_threads.values() for x, _ in values}) > 1:
        plot = plots.lines(by_threads, "threads", "p50 latency (ms)", "p50 latency against threads")
        out.append("<h3>p50 latency against threads</h3>" + plot)
    else:
        out.append('<p class="note">one thread count measured: pass --threads 1,2,4 for a threads sweep</p>')
    return "".join(out)


def _pareto(result: BenchmarkReport) -> str:
    """Latency against accuracy delta for every configuration with a measured delta; the front joined."""
    rows = [r for r in result.ok_rows() if r.accuracy_delta is not None]
    if len(rows) < 2:
        return '<p class="note">no accuracy trade-off measured: pass --precision f32,bf16,int8 --inputs photos/</p>'
    points = [(r.label, r.latency_ms("p50_ms"), 100 * float(r.accuracy_delta or 0)) for r in rows]
    front = {r.label for r in judging.pareto_front(result)}
    return plots.scatter(points, front, "p50 latency (ms)", "accuracy delta against f32 (%)")


def _table(result: BenchmarkReport) -> str:
    rows = views.summary_rows(result)
    if not rows:
        return ""
    header = "".join(f"<th>{_e(h)}</th>" for h in rows[0])
    body = []
    for row in rows:
        cells = []
        for key, value in row.items():
            css = (
                ' class="pass"' if value == "pass" else ' class="fail"' if key == "verdict" and value != "pass" else ""
            )
            cells.append(f"<td{css}>{_e(value)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><tr>{header}</tr>{''.join(body)}</table>"


def _section(result: BenchmarkReport) -> str:
    device, cpu = result.device, result.device["cpu"]
    recommendation = result.recommendation
    warnings = [f"{r.label}: {w}" for r in result.rows for w in r.warnings]
    return "".join(
        [
            f'<section class="device"><h2>{_e(Path(result.model.path).name)} on {_e(device.get("hostname"))}: '
            f"{_e(cpu['model'])}</h2>",
            f'<p class="note">{_e(cpu["logical_cores"])} logical cores, flags {_e(", ".join(cpu["flags"]) or "-")}, '
            f"governor {_e(cpu.get('governor') or 'unknown')}, {_e(device['os'])}, Python {_e(device['python'])}; "
            f"scenario {_e(result.settings.scenario)}, headline {_e(result.headline)}; {_e(result.created)}</p>",
            _table(result),
            (
                f"<p><b>Recommendation</b>: {_e(recommendation.label)} — {_e(recommendation.why)}<br>"
                f"<code>{_e(recommendation.command)}</code><br><code>{_e(recommendation.python)}</code></p>"
                if recommendation
                else '<p class="fail">no configuration was verified</p>'
            ),
            "".join(f'<p class="note">warning: {_e(w)}</p>' for w in warnings),
            "<h3>p50 / p99 latency</h3>",
            _bars(result.rows),
            "<h3>Latency distribution</h3>",
            _histograms(result.rows),
            _sweeps(result.rows),
            "<h3>Latency against accuracy (Pareto front in green)</h3>",
            _pareto(result),
            "</section>",
        ]
    )


def render_html(results: Sequence[BenchmarkReport]) -> str:
    """One self-contained page: one section per report (several devices' reports side by side)."""
    names = sorted({Path(r.model.path).name for r in results})
    title = f"deploykit bench: {', '.join(names)}"
    sections = "".join(_section(r) for r in results)
    return (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>'
        f"<style>{PAGE_STYLE}</style></head><body><h1>{_e(title)}</h1>"
        f'<div class="devices">{sections}</div></body></html>'
    )
