"""``deploykit optimize``: search backend × precision × INT8 × threads for the fastest configuration
within the accuracy budget, ranked with intervals, and write it as a bundle."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.markup import escape
from rich.table import Table

from deploykit.bench.config import parse_int_list
from deploykit.bench.load import BackgroundLoad

from . import options as opt
from .console import console, err_console, plain, print_json, step_bar
from .paths import folder_out, path_in

if TYPE_CHECKING:  # the CLI imports the optimize package (and its runtimes) only when it runs
    from deploykit.optimize import OptimizeReport, SearchProgress

INTERRUPTED_EXIT = 130


def print_optimize_report(report: OptimizeReport, output: Path | None, limit: int = 12) -> None:
    """The decision, the intervals of the best candidates, why the others stopped, the bundle."""
    unit = "samples/s" if report.headline == "throughput_sps" else "ms"
    best = report.best
    config = best.config
    title = "partial (interrupted): " if report.partial else ""
    console.print(
        f"[bold]{title}chosen: {best.label}[/] — {config.backend} on {config.device}, "
        f"{config.precision}, {config.threads or 'default'} threads, batch {config.batch}, "
        f"{best.variant} model"
    )
    console.print(f"why: {report.decision.reason}", soft_wrap=True)
    load = BackgroundLoad.from_dict(report.settings.background_load)
    console.print(
        f"decision: {report.decision.decision}; evidence {best.evidence()} (rounds / blocks / calls); "
        f"measured {load.describe()}",
        soft_wrap=True,
    )
    if best.accuracy_delta is not None:
        metric = report.metric if best.verdict is not None and best.verdict.task is not None else "element-wise"
        console.print(
            f"accuracy: {metric} delta {best.accuracy_delta:.2%} on {report.settings.accuracy_images} "
            f"held-out images (budget {report.settings.max_drop:.2%}); verdict "
            f"{best.verdict.label if best.verdict else '-'} against {report.oracle.name}"
        )
    truth = report.ground_truth
    if truth is not None:
        mine = "-" if best.top1_accuracy is None else f"{best.top1_accuracy:.2%}"
        theirs = "-" if truth.reference_top1_accuracy is None else f"{truth.reference_top1_accuracy:.2%}"
        console.print(
            f"top-1 accuracy against the class folders: {mine} (f32 oracle {truth.reference} {theirs}) on "
            f"{truth.images} held-out images of {len(truth.classes)} classes"
        )
    if report.baseline is not None:
        console.print(
            f"speedup: {report.baseline.speedup:.2f}× {report.baseline.label} "
            f"({report.baseline.headline.describe(unit)})"
        )
    table = Table(title=f"{report.headline} with bootstrap 95% intervals ({len(report.candidates)} candidates)")
    columns = ["candidate", report.headline, "interval", "rounds/blocks/calls", "accuracy Δ", "status"]
    if truth is not None:
        columns.insert(5, "top-1 acc.")
    for column in columns:
        table.add_column(column)
    for candidate in report.candidates[:limit]:
        interval = candidate.headline
        delta = "-" if candidate.accuracy_delta is None else f"{candidate.accuracy_delta:.2%}"
        reason = candidate.reason.split(": ")[0] if candidate.reason.startswith("slower") else candidate.reason
        status = candidate.status if candidate.status != "stopped" else f"stopped: {reason[:48]}"
        cells = [
            candidate.label,
            "-" if interval is None else f"{interval.estimate:.4g}",
            "-" if interval is None else interval.bounds(),
            candidate.evidence(),
            delta,
            status,
        ]
        if truth is not None:
            cells.insert(5, "-" if candidate.top1_accuracy is None else f"{candidate.top1_accuracy:.2%}")
        table.add_row(*cells)
    console.print(table)
    if len(report.candidates) > limit:
        console.print(f"... {len(report.candidates) - limit} more in report.json")
    console.print(f"Pareto front (headline vs accuracy delta): {_pareto_line(report)}", soft_wrap=True)
    console.print(f"rule: {report.decision.rule}", soft_wrap=True)
    for note in report.notes:
        console.print(f"note: {note}", soft_wrap=True)
    console.print(f"searched in {report.elapsed_s:.0f} s")
    if output is not None:
        console.print(
            f"bundle: {plain(output)} (open it with deploykit.load({escape(repr(str(output)))}) or deploykit "
            f"predict {plain(output)}; {plain(output / 'report.html')} draws the Pareto front)",
            soft_wrap=True,  # one line to copy, never folded inside the path
        )


def optimize(
    model: Path = typer.Argument(..., parser=path_in, help="The float .onnx file."),
    images: Path = typer.Option(
        None,
        "--images",
        parser=path_in,
        help="Real photos: half calibrate INT8, the other half measures accuracy (never both).",
    ),
    output: Path = typer.Option(
        ..., "--output", "-o", parser=folder_out, help="The bundle folder to write (new or empty)."
    ),
    max_drop: str = typer.Option("1%", "--max-drop", help="Accuracy budget: mAP@0.5 / top-1 agreement drop vs f32."),
    backends: opt.Backends = [],  # noqa: B006  (typer reads the default; never mutated)
    scenario: str = typer.Option("singlestream", help="singlestream (rank by p50) | offline (rank by throughput)."),
    time_budget: float = typer.Option(
        "5m",
        "--time-budget",
        metavar="DURATION",
        parser=opt.Duration(),
        help="The whole search's time budget, e.g. 90s, 10m or 1h.",
    ),
    no_quantize: bool = typer.Option(False, "--no-quantize", help="Search the float model's precisions only."),
    threads: str = typer.Option(None, help="Thread counts to search, e.g. 1,2 (default: 1, 2, 4 ... CPUs)."),
    batch: str = typer.Option(None, help="--scenario offline: batch sizes to search (default 1,8)."),
    engine: str = typer.Option("ort,nncf", "--quantizer", help="INT8 quantizers: ort, nncf (NNCF where installed)."),
    force: bool = typer.Option(False, "--force", help="Replace the bundle in a non-empty --output folder."),
    seed: int = typer.Option(0, parser=opt.SEED, help="Seed of the image split."),
    background_load: opt.BackgroundLoad = 0,
    as_json: opt.Json = False,
) -> None:
    """Find the fastest configuration that still gives the right answer; write it as a bundle."""
    from deploykit.optimize import OptimizePlan
    from deploykit.optimize import optimize as run_optimize

    bar = step_bar(disable=as_json)
    with bar:
        task = bar.add_task("preparing", total=None)

        def show(event: SearchProgress) -> None:
            best = "" if event.best is None else f" · best so far {event.best} ({event.best_value:.4g})"
            eta = "" if event.budget_left_s is None else f" · done within {event.budget_left_s:.0f} s (time budget)"
            left = f"{event.stage}: {event.alive}/{event.candidates} candidates left{best}{eta}"
            bar.update(task, completed=event.done, total=event.total or None, description=left)

        plan = OptimizePlan(
            max_drop=max_drop,
            backends=tuple(backends) or None,
            scenario=scenario,
            time_budget=time_budget,
            quantize=not no_quantize,
            threads=tuple(parse_int_list(threads, "threads")) if threads else None,
            batches=tuple(parse_int_list(batch, "batch")) if batch else None,
            engines=tuple(e.strip() for e in engine.split(",") if e.strip()),
            seed=seed,
            background_load=background_load,
        )
        report = run_optimize(model, images, plan, output=output, force=force, progress=show)
    if as_json:
        print_json(report.to_dict())
    else:
        print_optimize_report(report, output)
    if report.partial:
        err_console.print(f"interrupted: {plain(output)} holds the best configuration so far, marked partial")
        raise typer.Exit(INTERRUPTED_EXIT)


def _pareto_line(report: OptimizeReport) -> str:
    """The front's labels, each one that is not a verified answer followed by why (a failed verification,
    a headline from too few rounds to rank): the front shows what reduced precision would cost, not
    what may be chosen."""
    shown = []
    for label in report.pareto:
        candidate = report.candidate(label)
        why = []
        if candidate is not None and candidate.verdict is not None and candidate.verdict.status != "pass":
            why.append(f"verification {candidate.verdict.status}")
        if candidate is not None and candidate.headline is not None and not candidate.headline.sufficient:
            why.append("too few rounds to rank")
        shown.append(f"{label} ({'; '.join(why)})" if why else label)
    return ", ".join(shown) or "-"
