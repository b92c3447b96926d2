"""``deploykit run``: load a model on one backend and device, run it once, show the outputs.

The session runs in a worker process (deploykit's ``verify.isolated`` machinery, as ``compare``
uses), so a runtime that crashes is an error naming its signal, not the end of the command.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import typer
from rich.table import Table

from deploykit.backends.base import SessionInfo
from deploykit.backends.registry import DEFAULT_BACKEND
from deploykit.io import atomic_path, check_outputs
from deploykit.validation import check_seed
from deploykit.verify.isolated import DEFAULT_TIMEOUT_S, run_candidate

from . import options as opt
from .console import console, input_files, plain, print_json
from .paths import file_out, path_in


def run(
    model: Path = typer.Argument(..., parser=path_in, help="The .onnx file."),
    backend: str = typer.Option(DEFAULT_BACKEND, "--backend", "-b", help="Backend name or alias, or BACKEND:DEVICE."),
    device: opt.Device = None,
    inputs: list[str] = typer.Option(
        [],
        "--input",
        "-i",
        help="NAME=random, NAME=random:1x3x224x224, NAME=file.npy, or file.npz. "
        "Inputs not named get seeded random data.",
    ),
    options: opt.BackendOptions = [],  # noqa: B006  (typer reads the default; never mutated)
    allow_fallback: bool = typer.Option(
        False, "--allow-fallback", help="Run on the CPU if the device is unusable, and say so."
    ),
    seed: opt.Seed = 0,
    save: Path = typer.Option(
        None, "--output", "-o", readable=False, parser=file_out, help="Write the outputs to this .npz file."
    ),
    as_json: opt.Json = False,
    timeout: opt.Timeout = DEFAULT_TIMEOUT_S,
) -> None:
    """Run a model once and print each output's shape and statistics.

    The model runs in a worker process: a runtime crash is reported with its signal. A sequence
    output shows (and is saved) as one row per tensor, NAME[0], NAME[1] ...; an empty optional
    output is left out.
    """
    check_seed(seed)
    read: dict[str, str | Path] = {"model": model, **input_files(inputs)}
    check_outputs({"--output": save}, inputs=read)
    backend_options = opt.backend_options(options)
    backend, device = opt.backend_and_device(backend, device)
    job = {"allow_fallback": allow_fallback, "input_options": list(inputs), "seed": seed}
    run_ = run_candidate(model, backend, device, [], options=backend_options, timeout_s=timeout, extra=job)
    run_.raise_error(model)
    assert run_.info is not None and run_.outputs and run_.latency_ms, "a worker that ran reports what it ran"
    outputs, elapsed_ms, info = run_.outputs[0], run_.latency_ms[0], SessionInfo.from_dict(run_.info)
    if save is not None:
        with atomic_path(save) as temporary:
            with open(temporary, "wb") as handle:
                np.savez(handle, **outputs)  # type: ignore[arg-type]  # the stub fears a key named allow_pickle
    rows = [_stats(name, array) for name, array in outputs.items()]
    if as_json:
        print_json({"session": info.to_dict(), "latency_ms": elapsed_ms, "outputs": rows})
        return
    fallback = f" [yellow](fell back: {info.fallback_reason})[/]" if info.fallback else ""
    console.print(
        f"{plain(model.name)} on {info.backend} {info.device} ({info.precision}, "
        f"{info.backend_version}){fallback}: first run {elapsed_ms:.2f} ms"
    )
    table = Table()
    for column in ("output", "dtype", "shape", "min", "max", "mean", "std"):
        table.add_column(column)
    for row in rows:
        table.add_row(
            row["name"],
            row["dtype"],
            str(tuple(row["shape"])),
            *(f"{row[k]:.6g}" if row[k] is not None else "-" for k in ("min", "max", "mean", "std")),
        )
    console.print(table)
    if save is not None:
        console.print(f"outputs written to {save}")


def _stats(name: str, array: np.ndarray) -> dict[str, Any]:
    numeric = array.size > 0 and array.dtype.kind in "biuf"
    values = array.astype(np.float64) if numeric else None
    with np.errstate(invalid="ignore", over="ignore"):  # inf and NaN outputs have a NaN mean: say so, quietly
        return {
            "name": name,
            "dtype": array.dtype.name,
            "shape": list(array.shape),
            "min": float(values.min()) if values is not None else None,
            "max": float(values.max()) if values is not None else None,
            "mean": float(values.mean()) if values is not None else None,
            "std": float(values.std()) if values is not None else None,
        }
