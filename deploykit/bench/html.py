"""A single self-contained HTML page for one or several benchmark reports.

Plots are inline SVG (no scripts, no network): latency distribution per configuration,
p50/p99 bars, throughput against batch and latency against threads.
"""

from __future__ import annotations

import html
from collections import defaultdict
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from deploykit.bench.report import BenchmarkReport
    from deploykit.bench.rows import Row

_COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"]
PAGE_STYLE = """
body{font-family:system-ui,sans-serif;margin:1.5rem;color:#222}
h1{font-size:1.4rem}h2{font-size:1.15rem;margin-top:1.6rem}
table{border-collapse:collapse;font-size:.85rem;margin:.6rem 0}
td,th{border:1px solid #ccc;padding:.25rem .5rem;text-align:right}th{background:#f3f3f3}
td:first-child,th:first-child{text-align:left}
.devices{display:flex;flex-wrap:wrap;gap:2rem}.device{flex:1 1 45rem;min-width:30rem;overflow-x:auto}
.fail{color:#b00}.pass{color:#070}.note{color:#666;font-size:.85rem}
svg{background:#fff;border:1px solid #eee;margin:.3rem 0}
"""


def _e(value: Any) -> str:
    return html.escape(str(value))


def _bars(rows: list[Row]) -> str:
    """Grouped horizontal bars: p50 and p99 per configuration."""
    ok = [r for r in rows if r.ok]
    if not ok:
        return '<p class="note">no successful configuration to plot</p>'
    top = max(r.latency_ms("p99_ms") for r in ok) or 1.0
    label_width, bar_width, line = 230, 420, 34
    height = line * len(ok) + 30
    parts = [
        f'<svg class="plot" role="img" aria-label="p50 and p99 latency" width="{label_width + bar_width + 90}" height="{height}">'
    ]
    for i, row in enumerate(ok):
        y = 10 + i * line
        parts.append(f'<text x="4" y="{y + 16}" font-size="12">{_e(row.label)}</text>')
        for j, (key, colour) in enumerate((("p50_ms", "#1f77b4"), ("p99_ms", "#ff7f0e"))):
            value = row.latency_ms(key)
            width = max(1.0, bar_width * value / top)
            parts.append(
                f'<rect x="{label_width}" y="{y + j * 13}" width="{width:.1f}" height="11" fill="{colour}"><title>{key} {value:.3f} ms</title></rect>'
            )
            parts.append(
                f'<text x="{label_width + width + 4:.1f}" y="{y + j * 13 + 10}" font-size="10">{value:.3f}</text>'
            )
    parts.append(f'<text x="{label_width}" y="{height - 4}" font-size="11">blue p50, orange p99 (ms)</text></svg>')
    return "".join(parts)


def _histograms(rows: list[Row]) -> str:
    """One small histogram per configuration: the shape of its latency distribution."""
    cells = []
    for row in rows:
        hist = row.latency_histogram
        if not row.ok or not hist:
            continue
        counts, edges = hist.counts, hist.edges_ms
        peak = max(counts) or 1
        width, height = 260, 80
        step = width / len(counts)
        bars = "".join(
            f'<rect x="{i * step:.1f}" y="{height - 14 - (height - 24) * c / peak:.1f}" width="{max(step - 1, 1):.1f}" '
            f'height="{(height - 24) * c / peak:.1f}" fill="#2ca02c"/>'
            for i, c in enumerate(counts)
        )
        cells.append(
            f'<figure style="display:inline-block;margin:.2rem"><svg class="plot" role="img" aria-label="latency distribution" width="{width}" height="{height}">{bars}'
            f'<text x="2" y="{height - 2}" font-size="10">{edges[0]:.3f}</text>'
            f'<text x="{width - 2}" y="{height - 2}" font-size="10" text-anchor="end">{edges[-1]:.3f} ms</text></svg>'
            f'<figcaption class="note">{_e(row.label)}</figcaption></figure>'
        )
    return "".join(cells) or '<p class="note">no latency samples</p>'


def _axes(width: int, height: int, margin: int, x_label: str, y_label: str, *, extra_width: int) -> list[str]:
    """The opening of a plot: the svg element, both axes and their labels (close it with ``</svg>``)."""
    return [
        f'<svg class="plot" role="img" aria-label="{_e(y_label)} against {_e(x_label)}" width="{width + extra_width}" height="{height}">',
        f'<line x1="{margin}" y1="{height - margin}" x2="{width - margin}" y2="{height - margin}" stroke="#999"/>',
        f'<line x1="{margin}" y1="{margin}" x2="{margin}" y2="{height - margin}" stroke="#999"/>',
        f'<text x="{width / 2}" y="{height - 10}" font-size="11" text-anchor="middle">{_e(x_label)}</text>',
        f'<text x="4" y="{margin - 10}" font-size="11">{_e(y_label)}</text>',
    ]


def _lines(series: dict[str, list[tuple[float, float]]], x_label: str, y_label: str) -> str:
    points = [p for values in series.values() for p in values]
    if not points:
        return ""
    width, height, margin = 520, 240, 48
    x_min, x_max = min(p[0] for p in points), max(p[0] for p in points)
    y_max = max(p[1] for p in points) or 1.0
    x_span = (x_max - x_min) or 1.0

    def place(x: float, y: float) -> tuple[float, float]:
        return margin + (width - 2 * margin) * (x - x_min) / x_span, height - margin - (height - 2 * margin) * y / y_max

    parts = _axes(width, height, margin, x_label, f"{y_label} (max {y_max:.3g})", extra_width=200)
    for index, (name, values) in enumerate(sorted(series.items())):
        colour = _COLOURS[index % len(_COLOURS)]
        coordinates = [place(x, y) for x, y in sorted(values)]
        path = " ".join(f"{x:.1f},{y:.1f}" for x, y in coordinates)
        parts.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>')
        parts += [f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{colour}"/>' for x, y in coordinates]
        parts.append(
            f'<text x="{width - 20}" y="{margin + 14 * index}" font-size="11" fill="{colour}">{_e(name)}</text>'
        )
    for x, _ in points:
        px, _py = place(x, 0)
        parts.append(f'<text x="{px:.1f}" y="{height - margin + 14}" font-size="10" text-anchor="middle">{x:g}</text>')
    parts.append("</svg>")
    return "".join(parts)


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
        out.append("<h3>Throughput against batch</h3>" + _lines(by_batch, "batch", "samples/s"))
    else:
        out.append('<p class="note">one batch size measured: pass --batch 1,4,8 for a throughput curve</p>')
    if len({x for values in by_threads.values() for x, _ in values}) > 1:
        out.append("<h3>p50 latency against threads</h3>" + _lines(by_threads, "threads", "p50 ms"))
    else:
        out.append('<p class="note">one thread count measured: pass --threads 1,2,4 for a threads sweep</p>')
    return "".join(out)


def _pareto(result: BenchmarkReport) -> str:
    """Latency against accuracy delta for every configuration with a measured delta; the front joined."""
    rows = [r for r in result.ok_rows() if r.accuracy_delta is not None]
    if len(rows) < 2:
        return '<p class="note">no accuracy trade-off measured: pass --precision f32,bf16,int8 --inputs photos/</p>'
    points = [(r.label, r.latency_ms("p50_ms"), 100 * float(r.accuracy_delta or 0)) for r in rows]
    front = {r.label for r in result.pareto_front()}
    return pareto_plot(points, front, "p50 latency (ms)", "accuracy delta against f32 (%)")


def pareto_plot(
    points: Sequence[tuple[str, float, float]],
    front: Collection[str],
    x_label: str,
    y_label: str,
    *,
    chosen: str | None = None,
    name_all: bool = True,
) -> str:
    """A scatter of (label, x, y) points, one ``circle.point`` each (``data-label`` names it), the
    front's points green and joined, the chosen one ringed (``circle.chosen``); the axes carry their
    labels with units and their ranges. ``name_all=False`` names only the front and the chosen one
    beside their marks (every mark names itself in its tooltip)."""
    width, height, margin = 560, 260, 56
    xs, ys = [x for _, x, _ in points], [y for _, _, y in points]
    x_min, x_span = min(xs), (max(xs) - min(xs)) or 1.0
    y_max = max(max(ys), 1.0)

    def place(x: float, y: float) -> tuple[float, float]:
        return margin + (width - 2 * margin) * (x - x_min) / x_span, height - margin - (height - 2 * margin) * y / y_max

    parts = _axes(width, height, margin, x_label, f"{y_label}, 0 to {y_max:.2g}", extra_width=240)
    parts.append(f'<text x="{margin}" y="{height - margin + 30}" font-size="10">{x_min:.4g}</text>')
    parts.append(f'<text x="{width - margin}" y="{height - margin + 30}" font-size="10" text-anchor="end">'
                 f"{x_min + x_span:.4g}</text>")  # fmt: skip
    ordered = sorted(points, key=lambda point: point[1])
    path = " ".join(f"{place(x, y)[0]:.1f},{place(x, y)[1]:.1f}" for label, x, y in ordered if label in front)
    parts.append(f'<polyline class="front" points="{path}" fill="none" stroke="#2a7" stroke-width="2"/>')
    for label, x, y in ordered:
        px, py = place(x, y)
        on_front = label in front
        css = "point front" if on_front else "point"
        parts.append(f'<circle class="{css}" data-label="{_e(label)}" cx="{px:.1f}" cy="{py:.1f}" r="4" '
                     f'fill="{"#2a7" if on_front else "#bbb"}"><title>{_e(label)}: {x:.4g}, {y:.3g}</title></circle>')  # fmt: skip
        if label == chosen:
            parts.append(f'<circle class="chosen" data-label="{_e(label)}" cx="{px:.1f}" cy="{py:.1f}" r="8" '
                         'fill="none" stroke="#d62728" stroke-width="2"/>')  # fmt: skip
        if name_all or on_front or label == chosen:
            below = label == chosen and not name_all  # the chosen one's name under its ring, the front's above
            y_text = py + 16 if below else py - 6
            parts.append(f'<text x="{px + 6:.1f}" y="{y_text:.1f}" font-size="10">{_e(label)}</text>')
    parts.append("</svg>")
    legend = "green: the Pareto front" + ("; red ring: the chosen one" if chosen else "") + "; grey: the others"
    return "".join(parts) + f'<p class="note">{_e(legend)}</p>'


def _table(result: BenchmarkReport) -> str:
    rows = result.summary_rows()
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


def render_html(results: list[BenchmarkReport]) -> str:
    names = sorted({Path(r.model.path).name for r in results})
    title = f"deploykit bench: {', '.join(names)}"
    sections = "".join(_section(r) for r in results)
    return (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>'
        f"<style>{PAGE_STYLE}</style></head><body><h1>{_e(title)}</h1>"
        f'<div class="devices">{sections}</div></body></html>'
    )
