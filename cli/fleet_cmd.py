"""Beyond one machine: ``deploykit fleet join``, and the Ray branches of ``predict`` and ``bench``.

Only terminal work happens here (options, progress bars, tables); the work itself is in
``deploykit.distributed``.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from deploykit.bench.report_files import check_report_dir
from deploykit.errors import BackendUnavailableError, UsageError

from . import options as opt
from .bench_view import fleet_table
from .console import console, err_console, print_json, step_bar

if TYPE_CHECKING:
    from deploykit.bench.plan import BenchPlan
    from deploykit.distributed.settings import Execution

fleet_app = typer.Typer(help="Ray clusters of devices: join one, so `bench --fleet` measures this device too.")


def source_text(source: Path) -> str:
    """The source as typed: a Path argument folds ``s3://bucket`` to ``s3:/bucket``; unfold it."""
    text = str(source)
    return re.sub(r"^([a-zA-Z][a-zA-Z0-9+.-]*):/(?!/)", r"\1://", text)


def predict_dataset(
    model: Path,
    source: Path,
    out: str | None,
    execution: Execution,
    *,
    task: str,
    backend: str | None,
    device: str | None,
    top_k: int,
    cli_options: dict[str, Any],
) -> None:
    """``predict`` over a folder or bucket: rows into ``out``, a progress bar, a summary line."""
    from deploykit.distributed import PredictSettings, predict

    engine = execution.engine
    if out is None:
        raise UsageError(
            f"--engine {engine} | needs --output FOLDER for the result rows.", hint="e.g. --output results/."
        )
    from deploykit.tasks.registry import pipeline_tasks, task_class

    options = task_class(task).pipeline_options(cli_options) if task in pipeline_tasks() else {}
    with step_bar() as progress:
        bar = progress.add_task(f"predict ({engine})", total=None)

        def report(done: int, total: int) -> None:
            speed = progress.tasks[0].speed
            rate = f" {speed:.1f} rows/s" if speed else ""
            progress.update(bar, completed=done, total=total, description=f"predict ({engine}){rate}")

        settings = PredictSettings(task=task, backend=backend, device=device, top_k=top_k, pipeline_options=options)
        summary = predict(model, source_text(source), out, settings, execution, progress=report)
    if summary.skipped == summary.total:
        console.print(f"nothing to do: all {summary.total} inputs already have a row in {summary.out}")
        return
    startup = f", Ray start-up {summary.startup_s:.1f} s" if engine == "ray" else ""
    console.print(
        f"{summary.processed} rows written to {summary.out} ({summary.errors} with an error, "
        f"{summary.skipped} of {summary.total} inputs done before, {summary.actor_crashes} actor crashes retried); "
        f"{summary.images_per_s:.1f} rows/s on {summary.actors} {'actor' if summary.actors == 1 else 'actors'}{startup}"
    )


def bench_fleet(
    model: Path,
    address: str,
    devices: str | None,
    device_timeout_s: float,
    plan: BenchPlan,
    report_dir: Path | None,
    as_json: bool,
) -> None:
    """``bench --fleet``: one bench per device node, the merged table, the per-device recommendations."""
    from deploykit.distributed import fleet_benchmark

    if report_dir is not None:
        check_report_dir(report_dir, inputs=[model])
    names = [n.strip() for n in devices.split(",") if n.strip()] if devices else None
    with step_bar(disable=as_json) as progress:
        bar = progress.add_task("fleet bench", total=None)

        def report(done: int, total: int, name: str) -> None:
            progress.update(bar, completed=done, total=total, description=f"fleet bench ({name} finished)")

        result = fleet_benchmark(
            model, address, plan, devices=names, device_timeout_s=device_timeout_s, progress=report
        )
    if as_json:
        print_json(result.to_dict())
    else:
        console.print(fleet_table(result))
        for name, recommendation in result.recommendations().items():
            console.print(f"recommended on {name}: {recommendation.python if recommendation else 'none'}")
    if report_dir is not None:
        from deploykit.distributed.fleet_views import write_fleet_report

        paths = write_fleet_report(result, report_dir)
        console.print("report: " + ", ".join(str(p) for p in paths[:3]))
    if any(device.status != "ok" for device in result.devices):
        raise typer.Exit(1)


@fleet_app.command("join")
def join(
    address: str = typer.Option(
        ..., "--address", parser=opt.ray_address, help="The head node, HOST:6379 (as `ray start --address`)."
    ),
    name: str = typer.Option(None, "--name", help="Device name (default: from this device's fingerprint)."),
    num_cpus: int = typer.Option(
        None, "--num-cpus", parser=opt.COUNT, help="CPUs this node offers to Ray (default: all)."
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the `ray start` command instead of running it."),
) -> None:
    """Join this device to a Ray cluster with the resource deploykit-device:<name>."""
    from deploykit.distributed.cluster import DEVICE_RESOURCE_PREFIX
    from deploykit.distributed.fleet import device_name

    name = name or device_name()
    if not name or any(c in name for c in " ,:\"'{}"):
        raise UsageError(
            f"device name '{name}' | must be non-empty, without spaces, commas, colons or quotes.",
            hint="e.g. --name jetson-orin.",
        )
    ray_cli = shutil.which("ray", path=str(Path(sys.executable).parent)) or shutil.which("ray")
    resources = json.dumps({f"{DEVICE_RESOURCE_PREFIX}{name}": 1})
    command = [ray_cli or "ray", "start", "--address", address, "--resources", resources]
    if not dry_run:
        from deploykit.distributed.cluster import check_reachable

        check_reachable(address)  # `ray start` retries a dead address for minutes
    command += ["--num-cpus", str(num_cpus)] if num_cpus is not None else []
    if dry_run:
        typer.echo(shlex.join(command))
        return
    if ray_cli is None:
        raise BackendUnavailableError("ray | the `ray` command is not installed.", hint="pip install 'deploykit[ray]'.")
    completed = subprocess.run(command, env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"})
    if completed.returncode != 0:
        raise typer.Exit(completed.returncode)
    err_console.print(f"joined {address} as device '{name}'; bench --fleet will measure it.")


@fleet_app.command("devices")
def devices(
    address: str = typer.Option(
        "auto", "--address", parser=opt.ray_address, help="The cluster (HEAD:6379, ray://HEAD:10001, auto)."
    ),
    as_json: opt.Json = False,
) -> None:
    """List the device nodes of a Ray cluster: the names `bench --fleet --devices` takes."""
    from rich.table import Table

    from deploykit.distributed.cluster import connect
    from deploykit.distributed.fleet import fleet_devices

    with connect(address) as ray:
        found = fleet_devices(ray)
    if as_json:
        print_json(found)
        return
    table = Table(title=f"{len(found)} device nodes")
    table.add_column("device")
    table.add_column("node")
    for name, node in sorted(found.items()):
        table.add_row(name, node)
    console.print(table)
