"""``deploykit bench``: time every backend × device × precision × batch × threads, each verified."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from deploykit.bench.config import parse_int_list
from deploykit.bench.plan import BenchPlan
from deploykit.bench.report import BenchmarkReport
from deploykit.bench.report_files import check_report_dir, write_report
from deploykit.errors import UsageError
from deploykit.verify.settings import VerifySettings
from deploykit.verify.verdict import Verdict, VerificationReport

from . import options as opt
from .bench_view import print_bench_report
from .console import console, err_console, print_json, step_bar
from .paths import folder_out, path_in
from .platforms_cmd import PLATFORM_OPTION, print_emulated
from .verify_view import input_settings


def bench(
    model: Path = typer.Argument(
        ..., parser=path_in, help="The .onnx file, or a bundle folder: its chosen configuration."
    ),
    backends: opt.Backends = [],  # noqa: B006  (typer reads the default; never mutated)
    batch: str = typer.Option(None, help="Batch size(s), e.g. 1,4,8 (default: the model's own, or 1)."),
    threads: opt.Threads = None,
    precision: opt.Precision = None,
    scenario: str = typer.Option("singlestream", help="singlestream | offline | multistream."),
    streams: int = typer.Option(
        4, parser=opt.Number(low=1, high=1024, integer=True), help="Concurrent streams for --scenario multistream."
    ),
    warmup: opt.Warmup = 10,
    iterations: opt.Iterations = 100,
    duration: float = typer.Option(
        None,
        metavar="DURATION",
        parser=opt.Duration(),
        help="Time each configuration for this long instead (10s, 500ms, 2m).",
    ),
    inputs: Path = typer.Option(
        None,
        "--inputs",
        parser=path_in,
        help=".npz of input arrays, or an image / folder of images (default: seeded random).",
    ),
    shapes: opt.Shapes = [],  # noqa: B006
    batch_axes: opt.BatchAxes = [],  # noqa: B006
    seed: opt.Seed = 0,
    oracle: opt.Oracle = "auto",
    oracle_memory: opt.OracleMemory = None,
    atol: opt.Atol = None,
    rtol: opt.Rtol = None,
    min_cosine: opt.MinCosine = None,
    min_snr_db: opt.MinSnr = None,
    min_top1: opt.MinTop1 = None,
    min_map: opt.MinMap = None,
    max_drop: str = typer.Option(
        None, "--max-drop", help="Accuracy budget, e.g. 1%: recommend the fastest configuration within it."
    ),
    timeout: opt.Timeout = opt.DEFAULT_TIMEOUT,
    allow_failures: bool = typer.Option(
        False, "--allow-failures", help="Exit 0 even when a configuration fails or none can be recommended."
    ),
    in_process: bool = typer.Option(False, "--in-process", help="Measure in this process, not a subprocess each."),
    cost_per_hour: float = typer.Option(
        None, "--cost-per-hour", parser=opt.Number(low=0), help="Device price per hour → cost per 1M inferences."
    ),
    options: opt.BackendOptions = [],  # noqa: B006
    background_load: opt.BackgroundLoad = 0,
    rounds: int = typer.Option(
        1,
        "--rounds",
        parser=opt.COUNT,
        help="Isolated measurements per configuration, interleaved; 5 or more let one be called faster.",
    ),
    report_dir: Path = typer.Option(
        None, "--report", parser=folder_out, help="Write report.json/.csv/.md/.html into this directory."
    ),
    as_json: opt.Json = False,
    pipeline: str = typer.Option(
        None, "--pipeline", help="detect | classify: time the whole pipeline (pre + inference + post) on --images."
    ),
    images: Path = typer.Option(None, "--images", parser=path_in, help="With --pipeline: a folder of images."),
    fleet: str = typer.Option(
        None, "--fleet", parser=opt.ray_address, help="Ray cluster address: bench on every device node, merged."
    ),
    devices: str = typer.Option(None, "--devices", help="With --fleet: device names a,b (default: all)."),
    device_timeout: float = typer.Option(
        "30m",
        "--device-timeout",
        metavar="DURATION",
        parser=opt.Duration(),
        help="With --fleet: time limit per device.",
    ),
    recheck: bool = typer.Option(
        False, "--recheck", help="With a bundle: measure its choice here and compare with what it recorded."
    ),
    platform: str = PLATFORM_OPTION,
) -> None:
    """Benchmark a model on backends × devices × precisions × batch × threads; verify every configuration."""
    from deploykit.bench.runner import benchmark
    from deploykit.inputs import check_seed
    from deploykit.quantize import parse_drop

    bundle = None
    if model.is_dir():  # a bundle: exactly its chosen configuration
        from deploykit.optimize.bundle import elsewhere_message, read_bundle

        bundle = read_bundle(model)
        asked = [
            name
            for name, value in (
                ("--backend", backends),
                ("--threads", threads),
                ("--batch", batch),
                ("--precision", precision),
                ("--fleet", fleet),
                ("--pipeline", pipeline),
                ("--platform", platform),
            )
            if value
        ]
        if asked:
            raise UsageError(
                f"bench '{model}' | a bundle is benchmarked in the configuration it chose; "
                f"{', '.join(asked)} would change it.",
                hint=f"bench '{bundle.model_path}' itself to try other settings.",
            )
        manifest = bundle.manifest
        if bundle.model_path.suffix.lower() != ".onnx":
            raise UsageError(
                f"bench '{model}' | the bundle holds {manifest.model_file}, {manifest.backend}'s conversion of the "
                "searched model; bench judges every run against an oracle of the ONNX model, which the bundle does "
                "not carry.",
                hint=f"bench the searched model itself: deploykit bench {manifest.source_model.get('path')} "
                f"-b {manifest.backend} --threads {manifest.threads or 1} (report.json lists the variant's options).",
            )
        if bundle.elsewhere:
            err_console.print(f"warning: {elsewhere_message(bundle)}", soft_wrap=True)
        model, backends = bundle.model_path, [manifest.spec]
        threads = str(manifest.threads) if manifest.threads else ""  # "": the runtime's own
        # an INT8 bundle pins its float layers' precision in its options: measure what it opens
        batch, precision = str(manifest.batch), str(manifest.options.get("precision") or manifest.precision or "")
        options = [*options, *(f"{k}={v}" for k, v in manifest.options.items() if k not in ("threads", "precision"))]
    elif recheck:
        raise UsageError(
            "--recheck | compares a bundle's recorded choice with this machine; the model is a file.",
            hint="pass the bundle folder: deploykit bench deploy/ --recheck.",
        )

    if report_dir is not None:  # before any work: a report that cannot be written would lose the run
        check_report_dir(report_dir, inputs=[model, *([inputs] if inputs else [])])
    shape_settings, axes = input_settings(shapes, batch_axes)
    plan = BenchPlan(  # the one value every branch below measures by
        backends=tuple(backends) or None,
        batch=tuple(parse_int_list(batch, "batch")) if batch else None,
        threads=tuple(parse_int_list(threads, "threads")) if threads else None,
        precision=precision or None,
        scenario=scenario,
        streams=streams,
        warmup=warmup,
        iterations=iterations,
        duration_s=duration,
        shapes=shape_settings,
        batch_axes=axes,
        seed=check_seed(seed),
        oracle=oracle,
        oracle_memory_bytes=opt.oracle_memory(oracle_memory),
        thresholds=opt.thresholds(atol, rtol, min_cosine, min_snr_db, min_top1, min_map),
        max_drop=parse_drop(max_drop),
        isolate=not in_process,
        cost_per_hour=cost_per_hour,
        options=opt.backend_options(options),
        timeout_s=timeout,
        background_load=background_load,
        rounds=rounds,
    )
    if fleet is not None:  # one bench per device node of a Ray cluster: deploykit.distributed
        from .fleet_cmd import bench_fleet

        if inputs is not None:
            raise UsageError(
                "--inputs | is not sent to fleet nodes.", hint="fleet benchmarks use seeded random inputs."
            )
        bench_fleet(model, fleet, devices, device_timeout, plan, report_dir, as_json)
        return

    if pipeline is not None:
        from deploykit.bench.pipeline import benchmark_pipeline

        if images is None:
            raise UsageError("--pipeline | needs --images DIR.", hint="e.g. --pipeline detect --images photos/.")
        result = benchmark_pipeline(model, pipeline, images, plan=plan)
        _show(result, as_json, report_dir)
        return

    emulated = None
    if platform is not None:
        from deploykit.platforms import parse_platforms
        from deploykit.verify import compare

        chosen = parse_platforms(platform)
        targets = [p.name for p in chosen if p.emulated]
        if targets:  # verified like compare; one pass timed, shown apart, never ranked
            verify_settings = VerifySettings(
                oracle=plan.oracle,
                precision=plan.precision,
                shapes=plan.shapes,
                batch_axes=plan.batch_axes,
                seed=plan.seed,
                thresholds=plan.thresholds,
                options=plan.options,
                timeout_s=plan.timeout_s,
                platforms=",".join(targets),
                oracle_memory_bytes=plan.oracle_memory_bytes,
            )
            emulated = compare(model, list(plan.backends or []) or None, verify_settings, inputs=inputs)
        if all(p.emulated for p in chosen):
            assert emulated is not None
            if as_json:
                print_json(emulated.to_dict())
            else:
                print_emulated(emulated)
            bad = emulated.exit_code()
            if bad and not allow_failures:
                err_console.print(
                    "error: a configuration failed or did not verify. Hint: see the table; "
                    "--allow-failures exits 0 anyway."
                )
                raise typer.Exit(1)
            return
    if scenario == "offline" and batch in (None, "1"):
        err_console.print("note: offline scenario with batch 1; pass --batch 16 (or more) for throughput")
    progress = step_bar(disable=as_json)
    with progress:
        task = progress.add_task("benchmark", total=None)

        def report_progress(done: int, total: int, label: str) -> None:
            progress.update(task, completed=done, total=total, description=f"measuring {label}")

        result = benchmark(model, plan, inputs=inputs, progress=report_progress)
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
    if not interval.sufficient or interval.low is None or interval.high is None:
        console.print(
            f"recheck: p50 {now:.4g} ms here; the bundle recorded {interval.describe('ms')}, no interval "
            "to compare with; run deploykit optimize again for one"
        )
        return
    where = "inside" if interval.low <= now <= interval.high else ("below" if now < interval.low else "above")
    console.print(
        f"recheck: p50 {now:.4g} ms here ({row.latency.count} calls, 1 round); the bundle recorded "
        f"{interval.describe('ms')} over {interval.evidence()}: {where} its interval"
        + ("" if where == "inside" else "; run deploykit optimize again here to re-rank")
    )


def _show(
    result: BenchmarkReport,
    as_json: bool,
    report_dir: Path | None,
    allow_failures: bool = False,
    emulated: VerificationReport | None = None,
) -> None:
    if as_json:
        print_json(result.to_dict() | ({"emulated": emulated.to_dict()} if emulated else {}))
    else:
        print_bench_report(result)
        if emulated is not None:
            print_emulated(emulated)
    if report_dir is not None:
        paths = write_report(result, report_dir)
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
