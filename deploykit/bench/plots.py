"""The plots of the HTML reports, drawn by matplotlib and embedded as inline SVG.

Each function returns one ``<svg class="plot">`` element (its text as SVG ``<text>``, so a browser
can measure it): no scripts, no network, no files. matplotlib is driven through its object API
(``Figure`` and the Agg canvas for layout), never ``pyplot``, so no global backend is switched
in the caller's process. A scatter's points are numbered beside their marks, the numbers placed
where they overlap nothing, and keyed in a table under the plot: labels never run into each other.
This module only draws; what is plotted (the front, the chosen one) is decided by the caller.
"""

from __future__ import annotations

import html
import io
import re
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from deploykit.errors import DeployKitError

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"]
FRONT, OTHER, CHOSEN = "#2a7", "#bbb", "#d62728"
_STYLE: Any = {  # matplotlib types rcParams keys as one Literal; these are checked by matplotlib
    "svg.fonttype": "none",  # text stays <text>: selectable, measurable, small
    "svg.hashsalt": "deploykit",  # the same report draws the same ids
    "font.family": "DejaVu Sans",
    "font.size": 9,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.color": "#e5e5e5",
}


def _e(value: Any) -> str:
    return html.escape(str(value))


@contextmanager
def _figure(width_in: float, height_in: float) -> Iterator[tuple[Figure, Axes]]:
    try:
        import matplotlib
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:  # a core dependency; a broken install says so instead of a traceback
        raise DeployKitError(
            "HTML report | matplotlib cannot be imported, and it draws the report's plots.",
            hint="reinstall deploykit (pip install --force-reinstall deploykit) so that matplotlib is installed.",
        ) from exc
    with matplotlib.rc_context(_STYLE):
        figure = Figure(figsize=(width_in, height_in), dpi=72)
        FigureCanvasAgg(figure)
        yield figure, figure.add_subplot()


def _svg(figure: Figure, label: str, marks: Mapping[str, tuple[str, str]] | None = None) -> str:
    """The figure as one inline ``<svg>``: no XML prolog, an accessible name, and each artist in
    ``marks`` (gid → (class, data-label)) tagged so that tests and readers can find it."""
    import matplotlib

    buffer = io.StringIO()
    with matplotlib.rc_context(_STYLE):
        figure.savefig(buffer, format="svg", metadata={"Date": None, "Creator": None}, bbox_inches="tight")
    text = buffer.getvalue()
    text = text[text.index("<svg") :]
    text = text.replace("<svg ", f'<svg class="plot" role="img" aria-label="{_e(label)}" ', 1)
    for gid, (css, data_label) in (marks or {}).items():
        text = re.sub(rf'<g id="{re.escape(gid)}"', f'<g id="{gid}" class="{css}" data-label="{_e(data_label)}"', text)
    return text


def bars(groups: Sequence[tuple[str, Sequence[tuple[str, float]]]], x_label: str, label: str) -> str:
    """Horizontal grouped bars: one group per name, one bar per (series, value), the value at its end."""
    series = list(dict.fromkeys(name for _, values in groups for name, _ in values))
    height = 0.9 + 0.22 * len(groups) * max(1, len(series))
    with _figure(7.5, height) as (figure, axes):
        step = 0.8 / max(1, len(series))
        for index, name in enumerate(series):
            ys, widths = [], []
            for position, (_, values) in enumerate(groups):
                value = dict(values).get(name)
                if value is not None:
                    ys.append(len(groups) - 1 - position + (len(series) - 1 - index - (len(series) - 1) / 2) * step)
                    widths.append(value)
            drawn = axes.barh(ys, widths, height=step * 0.9, color=COLOURS[index % len(COLOURS)], label=name)
            axes.bar_label(drawn, fmt="%.3g", padding=2, fontsize=7)
        axes.set_yticks(range(len(groups)), [name for name, _ in reversed(groups)])
        axes.set_xlabel(x_label)
        axes.margins(x=0.12)
        axes.grid(axis="y", visible=False)
        if len(series) > 1:
            axes.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
        return _svg(figure, label)


def histogram(counts: Sequence[int], edges: Sequence[float], x_label: str, y_label: str, label: str) -> str:
    """One distribution as filled steps, with both axes labelled."""
    with _figure(3.4, 2.1) as (figure, axes):
        from matplotlib.ticker import MaxNLocator

        axes.stairs(counts, edges, fill=True, color=COLOURS[2])
        axes.set_xlabel(x_label)
        axes.set_ylabel(y_label)
        axes.xaxis.set_major_locator(MaxNLocator(4))
        axes.yaxis.set_major_locator(MaxNLocator(4, integer=True))
        return _svg(figure, label)


def lines(series: Mapping[str, Sequence[tuple[float, float]]], x_label: str, y_label: str, label: str) -> str:
    """One line with marks per series, the legend beside the axes."""
    with _figure(7.5, 2.8) as (figure, axes):
        for index, (name, values) in enumerate(sorted(series.items())):
            xs, ys = zip(*sorted(values), strict=True)
            axes.plot(xs, ys, marker="o", color=COLOURS[index % len(COLOURS)], label=name)
        axes.set_xticks(sorted({x for values in series.values() for x, _ in values}))
        axes.set_xlabel(x_label)
        axes.set_ylabel(y_label)
        axes.set_ylim(bottom=0)
        axes.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
        return _svg(figure, label)


# Where a point's number may go, in points from its mark: beside it first, then further out.
_OFFSETS = [
    (dx * r, dy * r)
    for r in (1, 2, 3, 4.5)
    for dx, dy in ((5, 4), (5, -11), (-11, 4), (-11, -11), (-3, 8), (-3, -15), (8, -3), (-14, -3))
]


def _number(axes: Axes, number: int, point: tuple[float, float], offset: tuple[float, float]) -> Any:
    """A point's number, ``offset`` points from its mark; joined to it by a thin line when far."""
    far = abs(offset[0]) > 11 or abs(offset[1]) > 15
    line = {"arrowstyle": "-", "color": "#999", "lw": 0.6, "shrinkA": 0, "shrinkB": 3} if far else None
    return axes.annotate(str(number), point, xytext=offset, textcoords="offset points", fontsize=8, arrowprops=line)


def _overlaps(box: Any, others: Sequence[Any]) -> bool:
    return any(box.overlaps(other) for other in others)


def scatter(
    points: Sequence[tuple[str, float, float]],
    front: Collection[str],
    x_label: str,
    y_label: str,
    *,
    chosen: str | None = None,
) -> str:
    """Points (label, x, y), each numbered beside its mark, the front green and joined, the chosen one
    ringed red; a table under the plot keys the numbers to the labels and values.

    Each mark is one ``<g class="point [front]" data-label=...>`` (the chosen one's ring a
    ``<g class="chosen">``); the numbers are placed greedily where they cover no other number and
    no mark, moving further out (with a leader line) when the places beside the mark are taken.
    """
    ordered = sorted(points, key=lambda point: (point[1], point[2], point[0]))
    marks: dict[str, tuple[str, str]] = {}
    with _figure(7.5, 3.6) as (figure, axes):
        front_points = [(x, y) for name, x, y in ordered if name in front]
        if len(front_points) > 1:
            axes.plot(*zip(*front_points, strict=True), color=FRONT, linewidth=1.5, zorder=1)
        for number, (name, x, y) in enumerate(ordered, 1):
            on_front = name in front
            (mark,) = axes.plot([x], [y], "o", markersize=6, color=FRONT if on_front else OTHER, zorder=3)
            mark.set_gid(f"dk-point-{number}")
            marks[f"dk-point-{number}"] = ("point front" if on_front else "point", name)
            if name == chosen:
                (ring,) = axes.plot(
                    [x],
                    [y],
                    "o",
                    markersize=13,
                    markerfacecolor="none",
                    markeredgecolor=CHOSEN,
                    markeredgewidth=1.8,
                    zorder=2,
                )
                ring.set_gid("dk-chosen")
                marks["dk-chosen"] = ("chosen", name)
        axes.set_xlabel(x_label)
        axes.set_ylabel(y_label)
        axes.margins(0.12)
        figure.subplots_adjust(left=0.1, right=0.98, bottom=0.15, top=0.96)
        renderer = figure.canvas.get_renderer()  # type: ignore[attr-defined]
        figure.draw(renderer)  # fixes the limits and transforms before anything is measured
        taken = [line.get_window_extent(renderer).expanded(1.1, 1.1) for line in axes.lines if line.get_gid()]
        inside = axes.get_window_extent(renderer)
        for number, (_, x, y) in enumerate(ordered, 1):
            for dx, dy in _OFFSETS:
                note = _number(axes, number, (x, y), (dx, dy))
                box = note.get_window_extent(renderer).expanded(1.15, 1.15)
                fits = inside.x0 <= box.x0 and box.x1 <= inside.x1 and inside.y0 <= box.y0 and box.y1 <= inside.y1
                if fits and not _overlaps(box, taken):
                    taken.append(box)
                    break
                note.remove()
            else:  # nowhere free: the last place, so the number is still drawn
                _number(axes, number, (x, y), (dx, dy))
        plot = _svg(figure, f"{y_label} against {x_label}", marks)
    rows = []
    for number, (name, x, y) in enumerate(ordered, 1):
        css = ' class="pass"' if name == chosen else ""
        cells = [number, name, f"{x:.4g}", f"{y:.3g}", "yes" if name in front else ""]
        cells += ["chosen" if name == chosen else ""] if chosen else []
        rows.append(f"<tr{css}>" + "".join(f"<td>{_e(cell)}</td>" for cell in cells) + "</tr>")
    headers = ["#", "configuration", x_label, y_label, "on the front", *([""] if chosen else [])]
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    key = f'<table class="key"><tr>{head}</tr>{"".join(rows)}</table>'
    legend = "green: the Pareto front" + ("; red ring: the chosen one" if chosen else "") + "; grey: the others"
    return plot + f'<p class="note">{_e(legend)}; the numbers are keyed below</p>' + key
