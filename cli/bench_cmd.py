"""``deploykit bench``, ``deploykit compare`` and ``deploykit report``: the backend comparison commands."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from deploykit.bench.config import parse_duration, parse_int_list
from deploykit.bench.report import BenchmarkResult, merge_html
from deploykit.errors import UsageError
from deploykit.io import atomic_path, check_outputs

from .console import coerce, console, err_console, parse_pairs, print_json

BACKEND_HELP = "BACKEND or BACKEND:DEVICE (repeat); default: every available backend × device."


def bench(
    model: Path = typer.Argument(..., help="The .onnx file."),
    backends: list[str] = typer.Option([], "--backend", "-b", help=BACKEND_HELP),
    batch: str = typer.Option(None, help="Batch size(s), e.g. 1,4,8 (default: the model's own, or 1)."),
    threads: str = typer.Option(None, help="Thread count(s) to sweep, e.g. 1,2 (default: runtime's)."),
    precision: str = typer.Option(None, help="OpenVINO precision f32|bf16|f16 (default: the device's)."),
    scenario: str = typer.Option("singlestream", help="singlestream | offline | multistream."),
    streams: int = typer.Option(4, help="Concurrent streams for --scenario multistream."),
    warmup: int = typer.Option(10, help="Untimed runs before timing."),
    iterations: int = typer.Option(100, help="Timed runs per configuration."),
    duration: str = typer.Option(None, help="Time each configuration for this long instead (10s, 500ms)."),
    inputs: Path = typer.Option(
        None, "--inputs", help=".npz of input arrays, or an image / folder of images (default: seeded random)."
    ),
    seed: int = typer.Option(0, help="Seed for random inputs."),
    reference: str = typer.Option(None, help="Backend whose outputs the others must match (default: first)."),
    in_process: bool = typer.Option(False, "--in-process", help="Measure in this process, not a subprocess each."),
    cost_per_hour: float = typer.Option(
        None, "--cost-per-hour", help="Device price per hour → cost per 1M inferences."
    ),
    options: list[str] = typer.Option([], "--option", "-o", help="Backend option KEY=VALUE for every configuration."),
    report_dir: Path = typer.Option(None, "--report", help="Write report.json/.csv/.md/.html into this directory."),
    as_json: bool = typer.Option(False, "--json", help="Print the JSON report instead of the table."),
    pipeline: str = typer.Option(
        None, "--pipeline", help="detect | classify: time the whole pipeline (pre + inference + post) on --images."
    ),
    images: Path = typer.Option(None, "--images", help="With --pipeline: a folder of images."),
) -> None:
    """Benchmark a model on backends × devices × batch × threads; check every output against the reference."""
    from deploykit.bench.runner import benchmark, default_backend_specs

    if pipeline is not None:
        from deploykit.bench.pipeline import benchmark_pipeline

        if images is None:
            raise UsageError("--pipeline | needs --images DIR.", hint="e.g. --pipeline detect --images photos/.")
        pipeline_options = {k: coerce(v) for k, v in parse_pairs(options, "--option").items()}
        result = benchmark_pipeline(model, pipeline, images, backends or default_backend_specs(),
                                    iterations=iterations, warmup=warmup, options=pipeline_options)  # fmt: skip
        _show(result, as_json, report_dir)
        return

    if scenario == "offline" and batch in (None, "1"):
        err_console.print("note: offline scenario with batch 1; pass --batch 16 (or more) for throughput")
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=err_console,
        transient=True,
        disable=as_json,
    )
    with progress:
        task = progress.add_task("benchmark", total=None)

        def report_progress(done: int, total: int, label: str) -> None:
            progress.update(task, completed=done, total=total, description=f"measuring {label}")

        result = benchmark(
            model,
            backends or None,
            batch=parse_int_list(batch, "batch") if batch else None,
            threads=parse_int_list(threads, "threads") if threads else None,
            precision=precision,
            scenario=scenario,
            streams=streams,
            warmup=warmup,
            iterations=iterations,
            duration_s=parse_duration(duration) if duration else None,
            inputs=inputs,
            seed=seed,
            reference=reference,
            isolate=not in_process,
            cost_per_hour=cost_per_hour,
            options={k: coerce(v) for k, v in parse_pairs(options, "--option").items()},
            progress=report_progress,
        )
    _show(result, as_json, report_dir)


def _show(result: BenchmarkResult, as_json: bool, report_dir: Path | None) -> None:
    if as_json:
        print_json(result.data)
    else:
        console.print(result.table())
        for row in result.rows:
            for warning in row.get("warnings", []):
                err_console.print(f"warning: {row['config']['label']}: {warning}")
            if row.get("stages"):
                stages = row["stages"]
                split = f"pre {stages['pre_p50_ms']:.1f} ms, inference {stages['infer_p50_ms']:.1f} ms"
                console.print(f"{row['config']['label']}: {split}, post {stages['post_p50_ms']:.1f} ms (p50)")
        if result.data["recommendation"]:
            console.print(f"recommended: {result.data['recommendation']['python']}")
    if report_dir is not None:
        paths = result.write_all(report_dir)
        console.print("report: " + ", ".join(str(p) for p in paths))
    failed = [r for r in result.rows if (r.get("parity") or {}).get("passed") is False]
    if failed:
        raise typer.Exit(1)


def compare(
    model: Path = typer.Argument(..., help="The .onnx file."),
    backends: list[str] = typer.Option([], "--backend", "-b", help=BACKEND_HELP),
    batch: int = typer.Option(None, help="Batch size (default: the model's own, or 1)."),
    precision: str = typer.Option("f32", help="OpenVINO precision for the comparison (default f32)."),
    inputs: Path = typer.Option(
        None, "--inputs", help=".npz of input arrays, or an image / folder of images (default: seeded random)."
    ),
    seed: int = typer.Option(0, help="Seed for random inputs."),
    reference: str = typer.Option(None, help="Backend whose outputs the others must match (default: first)."),
    atol: float = typer.Option(None, help="Absolute tolerance (default by precision)."),
    rtol: float = typer.Option(None, help="Relative tolerance (default by precision)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """Check that backends compute the same outputs on the same inputs; exit 1 on a mismatch."""
    from deploykit.parity import compare_backends

    result = compare_backends(
        model,
        backends or None,
        batch=batch,
        precision=precision,
        inputs=inputs,
        seed=seed,
        reference=reference,
        atol=atol,
        rtol=rtol,
    )
    if as_json:
        print_json(result)
    else:
        table = Table(title=f"parity of {model.name} against {result['reference']}")
        for column in (
            "backend",
            "device",
            "precision",
            "output",
            "max abs err",
            "max rel err",
            "cosine",
            "verdict",
        ):
            table.add_column(column)
        for entry in result["backends"]:
            if entry["error"]:
                table.add_row(entry["label"], "-", "-", "-", "-", "-", "-", f"[red]failed[/]: {entry['error']}")
                continue
            for output in entry["outputs"]:
                verdict = "[green]pass[/]" if output["passed"] else "[red]FAIL[/]"
                table.add_row(
                    entry["label"],
                    entry["device"],
                    entry["precision"],
                    output["name"],
                    f"{output['max_abs_error']:.2e}",
                    f"{output['max_rel_error']:.2e}",
                    f"{output['cosine']:.6f}",
                    verdict,
                )
        console.print(table)
        for entry in result["backends"]:
            for message in entry.get("failures", []):
                err_console.print(f"mismatch: {entry['label']}: {message}")
    if not result["passed"]:
        raise typer.Exit(1)


def report(
    reports: list[str] = typer.Argument(
        ..., help="REPORT.json [--baseline OLD.json], or: merge A.json B.json ... -o fleet.html"
    ),
    baseline: Path = typer.Option(None, "--baseline", help="An earlier report.json to check for regressions."),
    threshold: float = typer.Option(0.10, help="Allowed slowdown before it is a regression (0.10 = 10%)."),
    output: Path = typer.Option(None, "--output", "-o", help="With merge: the HTML file to write."),
) -> None:
    """Show a saved report, check it against a baseline (exit 1 on regression), or merge several into HTML."""
    if reports[0] == "merge":
        if len(reports) < 2 or output is None:
            raise UsageError(
                "report merge | needs report files and --output.",
                hint="deploykit report merge jetson.json nuc.json -o fleet.html",
            )
        check_outputs({"--output": output}, inputs={path: path for path in reports[1:]})
        loaded = [BenchmarkResult.from_json(path) for path in reports[1:]]
        with atomic_path(output) as temporary:
            temporary.write_text(merge_html(loaded))
        console.print(f"merged {len(loaded)} reports into {output}")
        return
    if len(reports) != 1:
        raise UsageError(
            f"report | got {len(reports)} files; give one report (with --baseline) or 'merge' first.",
            hint="deploykit report out/report.json --baseline last_week.json",
        )
    current = BenchmarkResult.from_json(reports[0])
    if baseline is None:
        console.print(current.table())
        return
    if threshold < 0:
        raise UsageError(f"threshold {threshold} | cannot be negative.", hint="e.g. --threshold 0.1 for 10%.")
    findings = current.regressions(BenchmarkResult.from_json(baseline), threshold)
    for finding in findings:
        console.print(f"[red]regression[/]: {finding}")
    if findings:
        raise typer.Exit(1)
    console.print(f"no regression beyond {threshold:.0%} against {baseline}")
