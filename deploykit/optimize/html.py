"""The optimize report as one self-contained HTML page (``report.html`` in the bundle): the choice
and the rule that decided, the Pareto front of headline against accuracy delta, every candidate.

The plot is bench's (``deploykit.bench.plots.scatter``): matplotlib's inline SVG, no scripts, no network.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any

from deploykit.bench import plots
from deploykit.bench.html import PAGE_STYLE
from deploykit.bench.load import BackgroundLoad

if TYPE_CHECKING:
    from deploykit.optimize.results import CandidateResult, OptimizeReport


def _e(value: Any) -> str:
    return html.escape(str(value))


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.2%}"


def front_plot(report: OptimizeReport) -> str:
    """Every measured candidate with an accuracy delta as a point, the front green, the chosen one ringed."""
    offline = report.headline == "throughput_sps"
    placed = [c for c in report.candidates if c.headline is not None and c.accuracy_delta is not None]
    if not placed:
        return '<p class="note">no candidate was measured with an accuracy delta</p>'
    points = [(c.label, c.headline.estimate, 100 * c.accuracy_delta) for c in placed]  # type: ignore[union-attr,operator]
    x_label = "throughput (samples/s, higher is better)" if offline else "p50 latency (ms, lower is better)"
    metric = report.metric or "element-wise"
    y_label = f"accuracy delta against f32 ({metric}, %)"
    plot = plots.scatter(points, set(report.pareto), x_label, y_label, chosen=report.chosen)
    unplaced = [c.label for c in report.candidates if c.headline is not None and c.accuracy_delta is None]
    if unplaced:
        plot += f'<p class="note">measured without an accuracy delta (not drawn): {_e(", ".join(unplaced))}</p>'
    return plot


def _row(candidate: CandidateResult, truth: bool) -> str:
    interval = candidate.headline
    cells = [
        candidate.label,
        "-" if interval is None else f"{interval.estimate:.4g}",
        "-" if interval is None else interval.bounds(),
        candidate.evidence(),
        _percent(candidate.accuracy_delta),
        *([_percent(candidate.top1_accuracy)] if truth else []),
        "-" if candidate.verdict is None else candidate.verdict.label,
        candidate.status,
        candidate.reason,
    ]
    css = ' class="pass"' if candidate.status == "chosen" else ""
    return f"<tr{css}>" + "".join(f"<td>{_e(cell)}</td>" for cell in cells) + "</tr>"


def render_html(report: OptimizeReport) -> str:
    """The whole page."""
    from pathlib import Path

    best, truth = report.best, report.ground_truth
    config = best.config
    title = f"deploykit optimize: {Path(report.model.path).name}" + (" (partial)" if report.partial else "")
    headers = [
        "candidate",
        report.headline,
        "95% interval",
        "rounds / blocks / calls",
        "accuracy Δ",
        *(["top-1 accuracy"] if truth else []),
        "verdict",
        "status",
        "reason",
    ]
    facts = [
        f"<p><b>Chosen</b>: {_e(best.label)} — {_e(config.backend)} on {_e(config.device)}, {_e(config.precision)}, "
        f"{_e(config.threads or 'default')} threads, batch {_e(config.batch)}, {_e(best.variant)} model</p>",
        f"<p><b>Why</b>: {_e(report.decision.reason)}</p>",
        f"<p><b>Decision</b>: {_e(report.decision.decision)}; evidence {_e(best.evidence())} (rounds / blocks / "
        f"calls); measured {_e(BackgroundLoad.from_dict(report.settings.background_load).describe())}</p>",
        f'<p class="note">rule: {_e(report.decision.rule)}</p>',
    ]
    if report.baseline is not None:
        facts.append(f"<p>speedup: {report.baseline.speedup:.2f}× {_e(report.baseline.label)}</p>")
    if truth is not None:
        facts.append(
            f"<p>top-1 accuracy against the class folders: {_percent(best.top1_accuracy)} (f32 oracle "
            f"{_e(truth.reference)}: {_percent(truth.reference_top1_accuracy)}) on {truth.images} held-out images "
            f"of {len(truth.classes)} classes</p>"
        )
    body = "".join(
        [
            f"<h1>{_e(title)}</h1>",
            *facts,
            f"<h2>{_e(report.headline)} against accuracy delta (Pareto front in green)</h2>",
            front_plot(report),
            f"<h2>Every candidate ({len(report.candidates)})</h2>",
            "<table><tr>" + "".join(f"<th>{_e(h)}</th>" for h in headers) + "</tr>",
            "".join(_row(c, truth is not None) for c in report.candidates),
            "</table>",
            "".join(f'<p class="note">note: {_e(note)}</p>' for note in report.notes),
        ]
    )
    return (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>'
        f"<style>{PAGE_STYLE}</style></head><body>{body}</body></html>"
    )
