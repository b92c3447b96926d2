"""``deploykit export``: ONNX → a runtime's own files, verified (``export ncnn``, ``export mnn``, ``export litert``)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape

from . import options as opt
from .console import console
from .paths import file_out, path_in
from .verify_view import print_details, verdict_table

export_app = typer.Typer(help="Export an ONNX model to a runtime's own format, verified.", no_args_is_help=True)


@export_app.command("ncnn")
def ncnn_command(
    model: Path = typer.Argument(..., parser=path_in, help="The .onnx file."),
    output: Path = typer.Option(
        ...,
        "--output",
        "-o",
        readable=False,
        parser=file_out,
        help="OUT (or OUT.param): writes OUT.param, OUT.bin and OUT.json (the ONNX name → ncnn blob map).",
    ),
    fp16: bool = typer.Option(False, "--fp16", help="Store weights as f16 (judged by cosine/SNR and the task metric)."),
    shapes: opt.Shapes = [],  # noqa: B006  (typer reads the default; never mutated)
    inputs: Path = typer.Option(
        None, "--inputs", parser=path_in, help="An image or a folder of images to verify on (enables the task metric)."
    ),
    atol: opt.Atol = None,
    rtol: opt.Rtol = None,
    min_cosine: opt.MinCosine = None,
    min_snr_db: opt.MinSnr = None,
    min_top1: opt.MinTop1 = None,
    min_map: opt.MinMap = None,
    timeout: opt.Timeout = opt.DEFAULT_TIMEOUT,
) -> None:
    """Convert an ONNX model with pnnx to an ncnn .param/.bin pair; write it only if it passes against
    onnx's reference evaluator (element-wise at f32)."""
    from deploykit.export import export_ncnn

    done = export_ncnn(
        model,
        output,
        fp16=fp16,
        shapes=shapes,
        images=inputs,
        thresholds=opt.thresholds(atol, rtol, min_cosine, min_snr_db, min_top1, min_map).to_dict(),
        timeout_s=timeout,
    )
    console.print(f"[bold]{escape(str(model))}[/] → {done.param}, {done.bin}, {done.io}  ({done.weights} weights)")
    console.print("  names: " + ", ".join(f"{name} = {blob}" for name, blob in done.names.items()))
    console.print(verdict_table(f"the exported pair against {done.oracle.name}", done.verdicts))
    print_details(done.verdicts, done.notes)


@export_app.command("mnn")
def mnn_command(
    model: Path = typer.Argument(..., parser=path_in, help="The .onnx file."),
    output: Path = typer.Option(
        ...,
        "--output",
        "-o",
        readable=False,
        parser=file_out,
        help="OUT.mnn (or OUT): writes OUT.mnn and OUT.json (the ONNX interface and metadata).",
    ),
    inputs: Path = typer.Option(None, "--inputs", parser=path_in, help="An image or a folder of images to verify on."),
    atol: opt.Atol = None,
    rtol: opt.Rtol = None,
    timeout: opt.Timeout = opt.DEFAULT_TIMEOUT,
) -> None:
    """Convert an ONNX model with MNN's converter to a .mnn file; write it only if it passes against
    onnx's reference evaluator (element-wise at f32)."""
    from deploykit.export_mnn import export_mnn

    done = export_mnn(
        model,
        output,
        images=inputs,
        thresholds=opt.thresholds(atol, rtol, None, None, None, None).to_dict(),
        timeout_s=timeout,
    )
    console.print(f"[bold]{escape(str(model))}[/] → {done.model}, {done.io}  ({done.converter})")
    console.print(verdict_table(f"the exported file against {done.oracle.name}", done.verdicts))
    print_details(done.verdicts, done.notes)


@export_app.command("litert")
def litert_command(
    model: Path = typer.Argument(..., parser=path_in, help="The .onnx file (fixed sizes; a dynamic batch becomes 1)."),
    output: Path = typer.Option(
        ...,
        "--output",
        "-o",
        readable=False,
        parser=file_out,
        help="OUT.tflite (or OUT): writes OUT.tflite and OUT.json (the ONNX name and layout → signature map).",
    ),
    weights: str = typer.Option(
        "f32", "--weights", help="f32, f16 (half the size) or int8 (dynamic range: int8 weights, float activations)."
    ),
    inputs: Path = typer.Option(
        None, "--inputs", parser=path_in, help="An image or a folder of images to verify on (enables the task metric)."
    ),
    atol: opt.Atol = None,
    rtol: opt.Rtol = None,
    min_cosine: opt.MinCosine = None,
    min_snr_db: opt.MinSnr = None,
    min_top1: opt.MinTop1 = None,
    min_map: opt.MinMap = None,
    timeout: opt.Timeout = opt.DEFAULT_TIMEOUT,
) -> None:
    """Convert an ONNX model with onnx2tf (in the converter environment 'deploykit converters add litert'
    creates) to a LiteRT .tflite; write it only if it passes against onnx's reference evaluator."""
    from deploykit.export_litert import export_litert

    done = export_litert(
        model,
        output,
        weights=weights,
        images=inputs,
        thresholds=opt.thresholds(atol, rtol, min_cosine, min_snr_db, min_top1, min_map).to_dict(),
        timeout_s=timeout,
    )
    console.print(f"[bold]{escape(str(model))}[/] → {done.tflite}, {done.io}  ({done.weights} weights)")
    console.print("  names: " + ", ".join(f"{name} = {key}" for name, key in done.names.items()))
    console.print(verdict_table(f"the exported file against {done.oracle.name}", done.verdicts))
    print_details(done.verdicts, done.notes)
