"""``deploykit compare``: do the backends compute the same answer as an independent oracle?"""

from __future__ import annotations

from pathlib import Path

import typer

from .bench_cmd import BACKEND_HELP
from .console import coerce, console, parse_pairs, print_json
from .paths import path_in
from .platforms_cmd import PLATFORM_OPTION
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
    exit_for,
    input_settings,
    print_details,
    threshold_options,
    verdict_table,
)


def compare(
    model: Path = typer.Argument(..., parser=path_in, help="The .onnx file."),
    backends: list[str] = typer.Option([], "--backend", "-b", help=BACKEND_HELP),
    oracle: str = ORACLE_OPTION,
    precision: str = typer.Option("f32", help="Precision(s) to check, e.g. f32,bf16 (each where the backend has it)."),
    inputs: Path = typer.Option(
        None,
        "--inputs",
        parser=path_in,
        help=".npz of input arrays, or an image / folder of images (enables the task metric).",
    ),
    shapes: list[str] = SHAPE_OPTION,
    batch_axes: list[str] = BATCH_AXIS_OPTION,
    batch: int = typer.Option(None, help="Batch size of random inputs (default: the model's own, or 1)."),
    seed: int = typer.Option(0, help="Seed for random inputs."),
    atol: float = ATOL_OPTION,
    rtol: float = RTOL_OPTION,
    min_cosine: float = MIN_COSINE_OPTION,
    min_snr_db: float = MIN_SNR_OPTION,
    min_top1: float = MIN_TOP1_OPTION,
    min_map: float = MIN_MAP_OPTION,
    require_oracle: bool = typer.Option(False, "--require-oracle", help="Exit 1 when no independent oracle ran."),
    timeout: float = typer.Option(900, "--timeout", help="Seconds one backend's worker process may take."),
    options: list[str] = typer.Option([], "--option", "-o", help="Backend option KEY=VALUE for every backend."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
    platform: str = PLATFORM_OPTION,
) -> None:
    """Check every backend against an independent oracle on the same inputs; exit 1 on a failure,
    a crash, a disagreement or a degenerate reference."""
    from deploykit.inputs import check_seed
    from deploykit.verify import verify_model

    settings, axes = input_settings(shapes, batch_axes)
    report = verify_model(
        model,
        backends or None,
        oracle=oracle,
        inputs=inputs,
        precision=precision,
        batch=batch,
        shapes=settings,
        batch_axes=axes,
        seed=check_seed(seed),
        thresholds=threshold_options(atol, rtol, min_cosine, min_snr_db, min_top1, min_map),
        options={k: coerce(v) for k, v in parse_pairs(options, "--option").items()},
        timeout_s=timeout,
        platforms=platform,
    )
    if as_json:
        print_json(report.to_dict())
    else:
        independent = "independent" if report.oracle.independent else "NOT independent"
        title = f"{model.name} against {report.oracle.name} ({independent}), inputs {report.input_source}"
        console.print(verdict_table(title, report.verdicts))
        print_details(report.verdicts, report.notes)
    exit_for(report.verdicts, require_oracle=require_oracle)
