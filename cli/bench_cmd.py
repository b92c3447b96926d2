"""``deploykit bench``: time every backend × device × precision × batch × threads, each verified."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from deploykit.bench.config import parse_duration, parse_int_list
from deploykit.bench.report import BenchmarkReport, check_report_dir
from deploykit.errors import UsageError
from deploykit.verify.verdict import Verdict, VerificationReport

from .bench_view import print_bench_report
from .console import coerce, console, err_console, parse_pairs, print_json
from .paths import folder_out, path_in
from .platforms_cmd import PLATFORM_OPTION, print_emulated
from .verify_view import (
    ATOL_OPTION,
    BATCH_AXIS_OPTION,
    MIN_COSINE_OPTION,
    MIN_MAP_OPTION,
    MIN_SNR_OPTION,
    MIN_TOP1_OPTION,
    ORACLE_OPTION,
    RTOL_OPTION,
    SHAPE_OPTION,
    input_settings,
    threshold_options,
)

BACKEND_HELP = "BACKEND or BACKEND:DEVICE (repeat); default: every available backend × device."


def bench(
    model: Path = typer.Argument(
        ..., parser=path_in, help="The .onnx file, or a bundle folder: its chosen configuration."
    ),
    backends: list[str] = typer.Option([], "--backend", "-b", help=BACKEND_HELP),
    batch: str = typer.Option(None, help="Batch size(s), e.g. 1,4,8 (default: the model's own, or 1)."),
    threads: str = typer.Option(None, help="Thread count(s) to sweep, e.g. 1,2 (default: runtime's)."),
    precision: str = typer.Option(
        None, help="Precision sweep, e.g. f32,bf16,f16,int8 (each backend runs those it has here; default: device's)."
    ),
    scenario: str = typer.Option("singlestream", help="singlestream | offline | multistream."),
    streams: int = typer.Option(4, help="Concurrent streams for --scenario multistream."),
    warmup: int = typer.Option(10, help="Untimed runs before timing."),
    iterations: int = typer.Option(100, help="Timed runs per configuration."),
    duration: str = typer.Option(None, help="Time each configuration for this long instead (10s, 500ms)."),
    inputs: Path = typer.Option(
        None,
        "--inputs",
        parser=path_in,
        help=".npz of input arrays, or an image / folder of images (default: seeded random).",
    ),
    shapes: list[str] = SHAPE_OPTION,
    batch_axes: list[str] = BATCH_AXIS_OPTION,
    seed: int = typer.Option(0, help="Seed for random inputs."),
    oracle: str = ORACLE_OPTION,
    atol: float = ATOL_OPTION,
    rtol: float = RTOL_OPTION,
    min_cosine: float = MIN_COSINE_OPTION,
    min_snr_db: float = MIN_SNR_OPTION,
    min_top1: float = MIN_TOP1_OPTION,
    min_map: float = MIN_MAP_OPTION,
    max_drop: str = typer.Option(
        None, "--max-drop", help="Accuracy budget, e.g. 1%: recommend the fastest configuration within it."
    ),
    timeout: float = typer.Option(900, "--timeout", help="Seconds one configuration's worker may take."),
    allow_failures: bool = typer.Option(
        False, "--allow-failures", help="Exit 0 even when a configuration fails or none can be recommended."
    ),
    in_process: bool = typer.Option(False, "--in-process", help="Measure in this process, not a subprocess each."),
    cost_per_hour: float = typer.Option(
        None, "--cost-per-hour", help="Device price per hour → cost per 1M inferences."
    ),
    options: list[str] = typer.Option([], "--option", "-o", help="Backend option KEY=VALUE for every configuration."),
    report_dir: Path = typer.Option(
        None, "--report", parser=folder_out, help="Write report.json/.csv/.md/.html into this directory."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the JSON report instead of the table."),
    pipeline: str = typer.Option(
        None, "--pipeline", help="detect | classify: time the whole pipeline (pre + inference + post) on --images."
    ),
    images: Path = typer.Option(None, "--images", parser=path_in, help="With --pipeline: a folder of images."),
    fleet: str = typer.Option(None, "--fleet", help="Ray cluster address: bench on every device node, merged."),
    devices: str = typer.Option(None, "--devices", help="With --fleet: device names a,b (default: all)."),
    device_timeout: str = typer.Option("30m", "--device-timeout", help="With --fleet: time limit per device."),
    recheck: bool = typer.Option(
        False, "--recheck", help="With a bundle: measure its choice here and compare with what it recorded."
    ),
    platform: str = PLATFORM_OPTION,
) -> None:
    """Benchmark a model on backends × devices × precisions × batch × threads; verify every configuration."""
    from deploykit.bench.runner import benchmark, default_backend_specs
    from deploykit.quantize import parse_drop

    bundle = None
    if model.is_dir():  # a bundle: exactly its chosen configuration
        from deploykit.optimize.bundle import elsewhere_message, read_bundle

        bundle = read_bundle(model)
        asked = [name for name, value in (("--backend", backends), ("--threads", threads), ("--batch", batch),
                                          ("--precision", precision), ("--fleet", fleet),
                                          ("--pipeline", pipeline), ("--platform", platform)) if value]  # fmt: skip
        if asked:
            raise UsageError(f"bench '{model}' | a bundle is benchmarked in the configuration it chose; "
                             f"{', '.join(asked)} would change it.",
                             hint=f"bench '{bundle.model_path}' itself to try other settings.")  # fmt: skip
        if bundle.elsewhere:
            err_console.print(f"warning: {elsewhere_message(bundle)}", soft_wrap=True)
        manifest = bundle.manifest
        model, backends = bundle.model_path, [manifest.spec]
        threads = str(manifest.threads) if manifest.threads else ""  # "": the runtime's own
        batch, precision = str(manifest.batch), manifest.precision or ""
        options = [*options, *(f"{k}={v}" for k, v in manifest.options.items() if k not in ("threads", "precision"))]
    elif recheck:
        raise UsageError("--recheck | compares a bundle's recorded choice with this machine; the model is a file.",
                         hint="pass the bundle folder: deploykit bench deploy/ --recheck.")  # fmt: skip

    if report_dir is not None:  # before any work: a report that cannot be written would lose the run
        check_report_dir(report_dir, inputs=[model, *([inputs] if inputs else [])])
    if fleet is not None:  # one bench per device node of a Ray cluster: deploykit.distributed
        from .fleet_cmd import bench_fleet

        fleet_settings = {"backends": backends or None, "batch": parse_int_list(batch, "batch") if batch else None,
            "threads": parse_int_list(threads, "threads") if threads else None, "precision": precision,
            "scenario": scenario, "streams": streams, "warmup": warmup, "iterations": iterations, "seed": seed,
            "duration_s": parse_duration(duration) if duration else None,
            "options": {k: coerce(v) for k, v in parse_pairs(options, "--option").items()}}  # fmt: skip
        fleet_shapes, fleet_axes = input_settings(shapes, batch_axes)
        fleet_settings.update(
            shapes=fleet_shapes, batch_axes=fleet_axes, oracle=oracle, timeout_s=timeout,
            thresholds=threshold_options(atol, rtol, min_cosine, min_snr_db, min_top1, min_map),
            max_drop=parse_drop(max_drop),
        )  # fmt: skip
        bench_fleet(model, fleet, devices, parse_duration(device_timeout), fleet_settings, report_dir, as_json)
        return

    if pipeline is not None:
        from deploykit.bench.pipeline import benchmark_pipeline

        if images is None:
            raise UsageError("--pipeline | needs --images DIR.", hint="e.g. --pipeline detect --images photos/.")
        pipeline_options = {k: coerce(v) for k, v in parse_pairs(options, "--option").items()}
        result = benchmark_pipeline(model, pipeline, images, backends or default_backend_specs(),
                                    iterations=iterations, warmup=warmup, options=pipeline_options)  # fmt: skip
        _show(result, as_json, report_dir)
        return

    from deploykit.inputs import check_seed

    settings, axes = input_settings(shapes, batch_axes)
    emulated = None
    if platform is not None:
        from deploykit.platforms import parse_platforms
        from deploykit.verify import verify_model

        chosen = parse_platforms(platform)
        targets = [p.name for p in chosen if p.emulated]
        if targets:  # verified like compare; one pass timed, shown apart, never ranked
            emulated = verify_model(model, backends or None, oracle=oracle, inputs=inputs, precision=precision,
                                    shapes=settings, batch_axes=axes, seed=check_seed(seed),
                                    thresholds=threshold_options(atol, rtol, min_cosine, min_snr_db, min_top1, min_map),
                                    options={k: coerce(v) for k, v in parse_pairs(options, "--option").items()},
                                    timeout_s=timeout, platforms=targets)  # fmt: skip
        if all(p.emulated for p in chosen):
            assert emulated is not None
            if as_json:
                print_json(emulated.to_dict())
            else:
                print_emulated(emulated)
            bad = emulated.exit_code()
            if bad and not allow_failures:
                err_console.print("error: a configuration failed or did not verify. Hint: see the table; "
                                  "--allow-failures exits 0 anyway.")  # fmt: skip
                raise typer.Exit(1)
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
            precision=precision or None,
            scenario=scenario,
            streams=streams,
            warmup=warmup,
            iterations=iterations,
            duration_s=parse_duration(duration) if duration else None,
            inputs=inputs,
            shapes=settings,
            batch_axes=axes,
            seed=check_seed(seed),
            oracle=oracle,
            thresholds=threshold_options(atol, rtol, min_cosine, min_snr_db, min_top1, min_map),
            max_drop=parse_drop(max_drop),
            timeout_s=timeout,
            isolate=not in_process,
            cost_per_hour=cost_per_hour,
            options={k: coerce(v) for k, v in parse_pairs(options, "--option").items()},
            progress=report_progress,
        )
    if bundle is not None and recheck:
        _recheck(result, bundle)
    _show(result, as_json, report_dir, allow_failures, emulated)


def _recheck(result: BenchmarkReport, bundle: Any) -> None:
    """This machine's p50 of the bundle's configuration against the interval the bundle recorded."""
    from deploykit.optimize.ranking import Interval

    row = result.rows[0] if result.rows else None
    recorded = bundle.manifest.latency.get("p50_ms")
    if row is None or not row.ok or row.latency is None or recorded is None:
        err_console.print("recheck: the bundle's configuration did not run here, or it recorded no p50")
        return
    interval = Interval.from_dict(recorded)
    now = row.latency.p50_ms
    where = "inside" if interval.low <= now <= interval.high else ("below" if now < interval.low else "above")
    console.print(f"recheck: p50 {now:.4g} ms here; the bundle recorded {interval.describe('ms')} over "
                  f"{interval.rounds} rounds: {where} its interval"
                  + ("" if where == "inside" else "; run deploykit optimize again here to re-rank"))  # fmt: skip


def _show(result: BenchmarkReport, as_json: bool, report_dir: Path | None, allow_failures: bool = False,
          emulated: VerificationReport | None = None) -> None:  # fmt: skip
    if as_json:
        print_json(result.to_dict() | ({"emulated": emulated.to_dict()} if emulated else {}))
    else:
        print_bench_report(result)
        if emulated is not None:
            print_emulated(emulated)
    if report_dir is not None:
        paths = result.write_all(report_dir)
        console.print("report: " + ", ".join(str(p) for p in paths))
    failed = [r for r in result.rows if not r.ok or (r.verdict is not None and _bad(r.verdict))]
    failed_emulated = [v for v in (emulated.verdicts if emulated else []) if _bad(v)]
    problems = [f"{len(failed)} configuration(s) failed or did not verify"] if failed else []
    if failed_emulated:
        problems.append(f"{len(failed_emulated)} emulated configuration(s) failed or did not verify")
    if result.recommendation is None:
        problems.append("no configuration can be recommended")
    if problems and allow_failures:
        err_console.print(f"note: {'; '.join(problems)} (exit 0 because of --allow-failures)")
    elif problems:
        err_console.print(f"error: {'; '.join(problems)}. Hint: see the table; --allow-failures exits 0 anyway.")
        raise typer.Exit(1)


def _bad(verdict: Verdict) -> bool:
    return verdict.blocking
