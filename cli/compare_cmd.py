"""``deploykit compare``: do the backends compute the same answer as an independent oracle?"""

from __future__ import annotations

from pathlib import Path

import typer

from . import options as opt
from .console import console, plain, print_json
from .paths import path_in
from .platforms_cmd import PLATFORM_OPTION
from .verify_view import exit_for, input_settings, print_details, verdict_table


def compare(
    model: Path = typer.Argument(..., parser=path_in, help="The .onnx file."),
    backends: opt.Backends = [],  # noqa: B006  (typer reads the default; never mutated)
    oracle: opt.Oracle = "auto",
    oracle_memory: opt.OracleMemory = None,
    precision: opt.Precision = "f32",
    inputs: Path = typer.Option(
        None,
        "--inputs",
        parser=path_in,
        help=".npz of input arrays, or an image / folder of images (enables the task metric).",
    ),
    shapes: opt.Shapes = [],  # noqa: B006
    batch_axes: opt.BatchAxes = [],  # noqa: B006
    batch: int = typer.Option(
        None, parser=opt.COUNT, help="Batch size of random inputs (default: the model's own, or 1)."
    ),
    seed: opt.Seed = 0,
    atol: opt.Atol = None,
    rtol: opt.Rtol = None,
    min_cosine: opt.MinCosine = None,
    min_snr_db: opt.MinSnr = None,
    min_top1: opt.MinTop1 = None,
    min_map: opt.MinMap = None,
    require_oracle: bool = typer.Option(False, "--require-oracle", help="Exit 1 when no independent oracle ran."),
    timeout: opt.Timeout = opt.DEFAULT_TIMEOUT,
    options: opt.BackendOptions = [],  # noqa: B006
    as_json: opt.Json = False,
    platform: str = PLATFORM_OPTION,
) -> None:
    """Check every backend against an independent oracle on the same inputs; exit 1 on a failure,
    a crash, a disagreement or a degenerate reference."""
    from deploykit import verify
    from deploykit.inputs import check_seed
    from deploykit.verify import VerifySettings

    shape_settings, axes = input_settings(shapes, batch_axes)
    settings = VerifySettings(
        oracle=oracle,
        precision=precision,
        batch=batch,
        shapes=shape_settings,
        batch_axes=axes,
        seed=check_seed(seed),
        thresholds=opt.thresholds(atol, rtol, min_cosine, min_snr_db, min_top1, min_map),
        options=opt.backend_options(options),
        timeout_s=timeout,
        platforms=platform,
        oracle_memory_bytes=opt.oracle_memory(oracle_memory),
    )
    report = verify.compare(model, backends or None, settings, inputs=inputs)
    if as_json:
        print_json(report.to_dict())
    else:
        independent = "independent" if report.oracle.independent else "NOT independent"
        title = f"{plain(model.name)} against {report.oracle.name} ({independent}), inputs {report.input_source}"
        console.print(verdict_table(title, report.verdicts))
        print_details(report.verdicts, report.notes)
    exit_for(report.verdicts, require_oracle=require_oracle)
