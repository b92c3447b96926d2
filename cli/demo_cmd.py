"""``deploykit demo``: build a small model, run it on every available backend, check parity."""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import typer
from rich.table import Table

import deploykit
from deploykit.backends.registry import all_backends
from deploykit.compare import compare_outputs
from deploykit.errors import DeployKitError
from deploykit.inputs import make_inputs
from deploykit.io import atomic_path
from deploykit.model import run_reference
from deploykit.samples import tiny_classifier

from .console import console


def demo(
    directory: Path = typer.Option(
        None, "--dir", help="Where to write the demo model (default: a temporary directory)."
    ),
    iterations: int = typer.Option(50, min=1, help="Timed runs per backend."),
) -> None:
    """Build an embedded model, run it on every available backend, compare with the ONNX reference."""
    import onnx

    workdir = directory or Path(tempfile.mkdtemp(prefix="deploykit-demo-"))
    workdir.mkdir(parents=True, exist_ok=True)
    model_path = workdir / "tiny_classifier.onnx"
    with atomic_path(model_path) as temporary:
        onnx.save(tiny_classifier(), temporary)
    console.print(f"[bold]1.[/] built {model_path}")

    with deploykit.load(model_path) as probe:
        feeds = make_inputs(probe.inputs, seed=0, dims={"batch": 1})
    reference = run_reference(model_path, feeds)
    console.print("[bold]2.[/] reference outputs from onnx.reference.ReferenceEvaluator")

    table = Table(title="tiny_classifier, batch 1")
    for column in ("backend", "device", "precision", "load ms", "p50 ms", "max abs err", "parity"):
        table.add_column(column)
    for backend in all_backends():
        reason = backend.unavailable_reason()
        if reason:
            table.add_row(backend.name, "-", "-", "-", "-", "-", f"[yellow]skipped[/]: {reason}")
            continue
        options = {"precision": "f32"} if backend.name == "openvino" else {}
        try:
            start = time.perf_counter()
            with backend.open(model_path, **options) as session:
                load_ms = (time.perf_counter() - start) * 1e3
                outputs = session.run(feeds)
                times = []
                for _ in range(iterations):
                    tick = time.perf_counter()
                    session.run(feeds)
                    times.append((time.perf_counter() - tick) * 1e3)
                info = session.info
        except DeployKitError as exc:
            table.add_row(backend.name, "-", "-", "-", "-", "-", f"[red]failed[/]: {exc}")
            continue
        parity = compare_outputs(outputs, reference, precision=info.precision)
        worst = max(o.max_abs_error for o in parity.outputs)
        table.add_row(
            backend.name,
            info.device,
            info.precision,
            f"{load_ms:.1f}",
            f"{statistics.median(times):.3f}",
            f"{worst:.2e}",
            "[green]pass[/]" if parity.passed else "[red]FAIL[/]",
        )
    console.print("[bold]3.[/] every available backend, same inputs:")
    console.print(table)
