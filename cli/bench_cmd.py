"""``deploykit bench``: time every backend × device × precision × batch × threads, each verified.

One command with five modes, each its own function: a model file (``bench_model``), a bundle's chosen
configuration (``bench_bundle``, with ``--recheck``), a Ray fleet (``bench_on_fleet``), an app pipeline
(``bench_pipeline``) and emulated platforms (``bench_platforms``). The command reads its options, builds
the one ``BenchPlan`` and dispatches; the modes share how a result is shown and judged (``BenchOutput``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from deploykit.backends.options import OptionValue
from deploykit.bench.config import parse_int_list
from deploykit.bench.plan import BenchPlan, bundle_options
from deploykit.bench.report import BenchmarkReport
from deploykit.bench.report_files import check_report_dir, write_report
from deploykit.errors import UsageError
from deploykit.verify.verdict import Verdict, VerificationReport

from . import options as opt
from .bench_view import print_bench_report
from .console import console, err_console, parse_pairs, print_json, step_bar
from .paths import folder_out, path_in
from .platforms_cmd import PLATFORM_OPTION, print_emulated
from .verify_view import input_settings

if TYPE_CHECKING:
    from deploykit.optimize.bundle import Bundle

# The options only bench takes (the shared ones are in cli/options.py).
ModelOrBundle = Annotated[
    Path, typer.Argument(parser=path_in, help="The .onnx file, or a bundle folder: its chosen configuration.")
]
Batch = Annotated[str | None, typer.Option(help="Batch size(s), e.g. 1,4,8 (default: the model's own, or 1).")]
Scenario = Annotated[str, typer.Option(help="singlestream | offline | multistream.")]
Streams = Annotated[
    int,
    typer.Option(
        parser=opt.Number(low=1, high=1024, integer=True), help="Concurrent streams for --scenario multistream."
    ),
]
BenchDuration = Annotated[
    float | None,
    typer.Option(
        metavar="DURATION",
        parser=opt.Duration(),
        help="Time each configuration for this long instead (10s, 500ms, 2m).",
    ),
]
BenchInputs = Annotated[
    Path | None,
    typer.Option(
        "--inputs",
        parser=path_in,
        help=".npz of input arrays, or an image / folder of images (default: seeded random).",
    ),
]
MaxDrop = Annotated[
    str | None,
    typer.Option("--max-drop", help="Accuracy budget, e.g. 1%: recommend the fastest configuration within it."),
]
AllowFailures = Annotated[
    bool,
    typer.Option("--allow-failures", help="Exit 0 even when a configuration fails or none can be recommended."),
]
InProcess = Annotated[bool, typer.Option("--in-process", help="Measure in this process, not a subprocess each.")]
CostPerHour = Annotated[
    float | None,
    typer.Option("--cost-per-hour", parser=opt.Number(low=0), help="Device price per hour → cost per 1M inferences."),
]
Rounds = Annotated[
    int,
    typer.Option(
        "--rounds",
        parser=opt.COUNT,
        help="Isolated measurements per configuration, interleaved; 5 or more let one be called faster.",
    ),
]
ReportDir = Annotated[
    Path | None,
    typer.Option("--report", parser=folder_out, help="Write report.json/.csv/.md/.html into this directory."),
]
Pipeline = Annotated[
    str | None,
    typer.Option("--pipeline", help="detect | classify: time the whole pipeline (pre + inference + post) on --images."),
]
Images = Annotated[Path | None, typer.Option("--images", parser=path_in, help="With --pipeline: a folder of images.")]
Fleet = Annotated[
    str | None,
    typer.Option("--fleet", parser=opt.ray_address, help="Ray cluster address: bench on every device node, merged."),
]
FleetDevices = Annotated[str | None, typer.Option("--devices", help="With --fleet: device names a,b (default: all).")]
DEVICE_TIMEOUT_OPTION = typer.Option(
    "30m", "--device-timeout", metavar="DURATION", parser=opt.Duration(), help="With --fleet: time limit per device."
)
Recheck = Annotated[
    bool,
    typer.Option("--recheck", help="With a bundle: measure its choice here and compare with what it recorded."),
]


@dataclass(frozen=True)
class BenchOutput:
    """Where a bench's result goes, and whether a failed or unverified row fails the command."""

    as_json: bool = False
    report_dir: Path | None = None
    allow_failures: bool = False


@dataclass(frozen=True)
class FleetTarget:
    """``--fleet``, ``--devices`` and ``--device-timeout``: the Ray cluster a fleet bench runs on."""

    address: str
    devices: str | None
    device_timeout_s: float


def bench(
    model: ModelOrBundle,
    backends: opt.Backends = [],  # noqa: B006  (typer reads the default; never mutated)
    batch: Batch = None,
    threads: opt.Threads = None,
    precision: opt.Precision = None,
    scenario: Scenario = "singlestream",
    streams: Streams = 4,
    warmup: opt.Warmup = 10,
    iterations: opt.Iterations = 100,
    duration: BenchDuration = None,
    inputs: BenchInputs = None,
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
    max_drop: MaxDrop = None,
    timeout: opt.Timeout = opt.DEFAULT_TIMEOUT,
    allow_failures: AllowFailures = False,
    in_process: InProcess = False,
    cost_per_hour: CostPerHour = None,
    options: opt.BackendOptions = [],  # noqa: B006
    background_load: opt.BackgroundLoad = 0,
    rounds: Rounds = 1,
    report_dir: ReportDir = None,
    as_json: opt.Json = False,
    pipeline: Pipeline = None,
    images: Images = None,
    fleet: Fleet = None,
    devices: FleetDevices = None,
    device_timeout: float = DEVICE_TIMEOUT_OPTION,
    recheck: Recheck = False,
    platform: str | None = PLATFORM_OPTION,
) -> None:
    """Benchmark a model on backends × devices × precisions × batch × threads; verify every configuration."""
    from deploykit.inputs import check_seed
    from deploykit.quantize import parse_drop

    bundle = None
    if model.is_dir():  # a bundle: exactly its chosen configuration
        changing = {"--backend": backends, "--threads": threads, "--batch": batch, "--precision": precision}
        bundle = open_bundle(model, changing | {"--fleet": fleet, "--pipeline": pipeline, "--platform": platform})
        model = bundle.model_path
    elif recheck:
        raise UsageError(
            "--recheck | compares a bundle's recorded choice with this machine; the model is a file.",
            hint="pass the bundle folder: deploykit bench deploy/ --recheck.",
        )
    if report_dir is not None:  # before any work: a report that cannot be written would lose the run
        check_report_dir(report_dir, inputs=[model, *([inputs] if inputs else [])])
    shape_settings, axes = input_settings(shapes, batch_axes)
    plan = BenchPlan(  # the one value every mode measures by
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
        options=opt.backend_options(options) if bundle is None else bundle_plan_options(bundle, options),
        timeout_s=timeout,
        background_load=background_load,
        rounds=rounds,
    )
    output = BenchOutput(as_json=as_json, report_dir=report_dir, allow_failures=allow_failures)
    if bundle is not None:
        bench_bundle(bundle, BenchPlan.from_bundle(bundle, plan), inputs, output, recheck=recheck)
    elif fleet is not None:  # one bench per device node of a Ray cluster: deploykit.distributed
        bench_on_fleet(model, FleetTarget(fleet, devices, device_timeout), plan, inputs, output)
    elif pipeline is not None:
        bench_pipeline(model, pipeline, images, plan, output)
    elif platform is not None:
        bench_platforms(model, platform, plan, inputs, output)
    else:
        bench_model(model, plan, inputs, output)


def open_bundle(folder: Path, asked: Mapping[str, object]) -> Bundle:
    """The bundle in ``folder``, refused when a flag in ``asked`` is set (it would change the configuration
    the bundle chose) or when it holds a converted model (bench judges against an oracle of ONNX)."""
    from deploykit.optimize.bundle import elsewhere_message, read_bundle

    bundle = read_bundle(folder)
    changing = [name for name, value in asked.items() if value]
    if changing:
        raise UsageError(
            f"bench '{folder}' | a bundle is benchmarked in the configuration it chose; "
            f"{', '.join(changing)} would change it.",
            hint=f"bench '{bundle.model_path}' itself to try other settings.",
        )
    manifest = bundle.manifest
    if bundle.model_path.suffix.lower() != ".onnx":
        raise UsageError(
            f"bench '{folder}' | the bundle holds {manifest.model_file}, {manifest.backend}'s conversion of the "
            "searched model; bench judges every run against an oracle of the ONNX model, which the bundle does "
            "not carry.",
            hint=f"bench the searched model itself: deploykit bench {manifest.source_model.get('path')} "
            f"-b {manifest.backend} --threads {manifest.threads or 1} (report.json lists the variant's options).",
        )
    if bundle.elsewhere:
        err_console.print(f"warning: {elsewhere_message(bundle)}", soft_wrap=True)
    return bundle


def bundle_plan_options(bundle: Bundle, options: list[str]) -> dict[str, OptionValue]:
    """The ``--option`` values beside a bundle's own options: each name once (``BenchPlan.from_bundle``
    refuses a plan option the bundle sets; here the refusal names the flag)."""
    given = parse_pairs(options, "--option")
    for name, value in bundle_options(bundle).items():
        if name in given:
            raise UsageError(
                f"--option '{name}' | is given twice ({name}={given[name]} and {name}={value}); "
                "expected each name once.",
                hint=f"keep one --option {name}=...",
            )
    return opt.backend_options(options)


def bench_model(
    model: Path,
    plan: BenchPlan,
    inputs: Path | None,
    output: BenchOutput,
    emulated: VerificationReport | None = None,
) -> None:
    """Measure and verify every configuration of ``plan`` on this machine, show the result and judge it."""
    _show(_measure(model, plan, inputs, output.as_json), output, emulated)


def bench_bundle(bundle: Bundle, plan: BenchPlan, inputs: Path | None, output: BenchOutput, recheck: bool) -> None:
    """A bundle's chosen configuration measured here; with ``recheck``, its p50 set against the interval the
    bundle recorded (printed before the result is judged)."""
    result = _measure(bundle.model_path, plan, inputs, output.as_json)
    if recheck:
        bench_recheck(result, bundle)
    _show(result, output)


def bench_on_fleet(model: Path, fleet: FleetTarget, plan: BenchPlan, inputs: Path | None, output: BenchOutput) -> None:
    """``--fleet``: one bench per device node of a Ray cluster, merged (seeded random inputs only)."""
    from .fleet_cmd import bench_fleet

    if inputs is not None:
        raise UsageError("--inputs | is not sent to fleet nodes.", hint="fleet benchmarks use seeded random inputs.")
    bench_fleet(model, fleet.address, fleet.devices, fleet.device_timeout_s, plan, output.report_dir, output.as_json)


def bench_pipeline(model: Path, task: str, images: Path | None, plan: BenchPlan, output: BenchOutput) -> None:
    """``--pipeline``: the whole app pipeline (pre-processing, inference, post-processing) timed on ``images``."""
    from deploykit.bench.pipeline import benchmark_pipeline

    if images is None:
        raise UsageError("--pipeline | needs --images DIR.", hint="e.g. --pipeline detect --images photos/.")
    result = benchmark_pipeline(model, task, images, plan=plan)
    _show(result, output)


def bench_platforms(model: Path, platforms: str, plan: BenchPlan, inputs: Path | None, output: BenchOutput) -> None:
    """``--platform``: the emulated targets verified like ``compare`` (one pass timed, shown apart, never
    ranked); the host, when named too, measured as ever beside them."""
    from deploykit.platforms import parse_platforms

    chosen = parse_platforms(platforms)
    targets = [p.name for p in chosen if p.emulated]
    emulated = _verify_emulated(model, targets, plan, inputs) if targets else None
    if not all(p.emulated for p in chosen):
        bench_model(model, plan, inputs, output, emulated)
        return
    assert emulated is not None
    if output.as_json:
        print_json(emulated.to_dict())
    else:
        print_emulated(emulated)
    if emulated.exit_code() and not output.allow_failures:
        err_console.print(
            "error: a configuration failed or did not verify. Hint: see the table; --allow-failures exits 0 anyway."
        )
        raise typer.Exit(1)


def _verify_emulated(model: Path, targets: list[str], plan: BenchPlan, inputs: Path | None) -> VerificationReport:
    from deploykit.verify import compare

    settings = plan.verify_settings(platforms=",".join(targets))
    return compare(model, list(plan.backends or []) or None, settings, inputs=inputs)


def _measure(model: Path, plan: BenchPlan, inputs: Path | None, quiet: bool) -> BenchmarkReport:
    """``benchmark`` with a step bar (none with ``--json``)."""
    from deploykit.bench.runner import benchmark

    if plan.scenario == "offline" and plan.batch in (None, (1,)):
        err_console.print("note: offline scenario with batch 1; pass --batch 16 (or more) for throughput")
    progress = step_bar(disable=quiet)
    with progress:
        task = progress.add_task("benchmark", total=None)

        def report_progress(done: int, total: int, label: str) -> None:
            progress.update(task, completed=done, total=total, description=f"measuring {label}")

        return benchmark(model, plan, inputs=inputs, progress=report_progress)


def bench_recheck(result: BenchmarkReport, bundle: Bundle) -> None:
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


def _show(result: BenchmarkReport, output: BenchOutput, emulated: VerificationReport | None = None) -> None:
    """The result as tables or JSON, the report files, and exit 1 when a row failed or nothing can be
    recommended (unless ``--allow-failures``)."""
    if output.as_json:
        print_json(result.to_dict() | ({"emulated": emulated.to_dict()} if emulated else {}))
    else:
        print_bench_report(result)
        if emulated is not None:
            print_emulated(emulated)
    if output.report_dir is not None:
        paths = write_report(result, output.report_dir)
        console.print("report: " + ", ".join(str(p) for p in paths))
    failed = [r for r in result.rows if not r.ok or (r.verdict is not None and _bad(r.verdict))]
    failed_emulated = [v for v in (emulated.verdicts if emulated else []) if _bad(v)]
    problems = [f"{len(failed)} configuration(s) failed or did not verify"] if failed else []
    if failed_emulated:
        problems.append(f"{len(failed_emulated)} emulated configuration(s) failed or did not verify")
    if result.recommendation is None:
        problems.append("no configuration can be recommended")
    if problems and output.allow_failures:
        err_console.print(f"note: {'; '.join(problems)} (exit 0 because of --allow-failures)")
    elif problems:
        err_console.print(f"error: {'; '.join(problems)}. Hint: see the table; --allow-failures exits 0 anyway.")
        raise typer.Exit(1)


def _bad(verdict: Verdict) -> bool:
    return verdict.blocking
