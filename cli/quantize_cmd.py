"""``deploykit quantize``: INT8 (ONNX Runtime or NNCF, QDQ) or float16, with the accuracy delta and speedup."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.table import Table

from deploykit.io import atomic_path, check_outputs

from . import options as opt
from .console import console, plain, print_json
from .paths import file_out, path_in

if TYPE_CHECKING:  # the CLI imports the quantize package (and its runtimes) only when it runs
    from deploykit.quantize import QuantizeReport


def _list(value: str | None) -> list[str]:
    return [item.strip() for item in (value or "").split(",") if item.strip()]


def _print(report: QuantizeReport) -> None:
    console.print(
        f"[bold]{report.precision}[/] model written to {plain(report.output)} by engine {report.engine}"
        + (f" ({report.method}, {'per-channel' if report.per_channel else 'per-tensor'})" if report.method else "")
        + f" in {report.seconds:.1f} s; {report.quantized_nodes} "
        + ("quantized tensors" if report.precision == "int8" else "nodes in float16")
    )
    if report.ir:
        console.print(f"OpenVINO IR written to {report.ir}")
    for kind, nodes in report.excluded.items():
        if nodes:
            label = "detector head kept in f32" if kind == "head" else "excluded by you"
            console.print(f"{label}: {len(nodes)} nodes ({', '.join(nodes[:6])}{' ...' if len(nodes) > 6 else ''})")
    if report.kept_f32_ops:
        console.print("kept in f32: " + ", ".join(f"{op} ×{n}" for op, n in report.kept_f32_ops.items()))
    accuracy = report.accuracy
    table = Table(title=f"Accuracy on {accuracy.samples} held-out samples ({accuracy.backend})")
    table.add_column("measure")
    table.add_column("value", justify="right")
    for key, value in ({} if accuracy.task is None else accuracy.task.to_dict()).items():
        if value is not None:
            table.add_row(key, f"{value:.4f}" if isinstance(value, float) else str(value))
    if accuracy.drop is not None:
        table.add_row(
            "drop", f"{accuracy.drop:.2%}" + (f" (budget {accuracy.max_drop:.2%})" if accuracy.max_drop else "")
        )
    for output in accuracy.outputs:
        table.add_row(f"{output.output}: cosine / SNR", f"{output.cosine:.5f} / {output.snr_db:.1f} dB")
    console.print(table)
    if report.speed:
        speed = Table(
            title=f"p50 latency, median of {report.speed.rounds} rounds of {report.speed.iterations} runs, "
            "each configuration in its own process"
        )
        for column in ("configuration", "f32 ms", f"{report.precision} ms", "speedup", "status"):
            speed.add_column(column)
        for row in report.speed.rows:
            cells = [row.f32_p50_ms, row.p50_ms]
            speed.add_row(
                row.configuration,
                *("-" if v is None else f"{v:.2f}" for v in cells),
                "-" if row.speedup is None else f"{row.speedup:.2f}×",
                row.status if row.status != "error" else f"error: {(row.error or '')[:80]}",
            )
        console.print(speed)
        recommended = report.speed.recommended
        console.print(f"recommended: {recommended}" if recommended else "no configuration is faster than f32 here")
    if report.layers:
        layers = Table(title="Nodes that add the most error (candidates for --exclude)")
        for column in ("node", "op", "SNR dB", "SNR lost dB"):
            layers.add_column(column)
        for layer in report.layers:
            layers.add_row(layer.node, layer.op_type, str(layer.snr_db), str(layer.snr_lost_db))
        console.print(layers)
    for note in report.notes:
        console.print(f"note: {note}")


def quantize(
    model: Path = typer.Argument(..., parser=path_in, help="The float .onnx model."),
    output: Path = typer.Option(..., "--output", "-o", parser=file_out, help="Where to write the quantized model."),
    calibrate: Path = typer.Option(
        None,
        "--calibrate",
        "-c",
        parser=path_in,
        help="Folder of images (photos/ or photos/<class>/) or an .npz of input arrays.",
    ),
    fp16: bool = typer.Option(False, "--fp16", help="Convert to float16 (inputs/outputs stay float32) instead."),
    engine: str = typer.Option("ort", "--quantizer", help="ort (ONNX Runtime static QDQ) | nncf (OpenVINO NNCF)."),
    method: str = typer.Option(None, "--method", help="ort calibration: minmax (default) | entropy | percentile."),
    calibration_size: int = typer.Option(
        100, "--calibration-size", parser=opt.COUNT, help="At most this many calibration samples."
    ),
    held_out: float = typer.Option(
        0.2,
        "--held-out",
        parser=opt.Number(low=0, high=1, high_open=True),
        help="Fraction kept for the accuracy delta, never calibrated.",
    ),
    evaluate_on: Path = typer.Option(
        None, "--eval", parser=path_in, help="Folder of evaluation images instead of the held-out split."
    ),
    max_drop: str = typer.Option(None, "--max-drop", help="Accuracy budget, e.g. 1% (nncf: accuracy-controlled)."),
    exclude: str = typer.Option(None, "--exclude", help="Comma-separated node names to keep in float."),
    quantize_head: bool = typer.Option(False, "--quantize-head", help="Also quantize a YOLO decode head."),
    per_tensor: bool = typer.Option(False, "--per-tensor", help="One scale per weight tensor (default: per channel)."),
    debug_layers: bool = typer.Option(False, "--debug-layers", help="Report the 10 nodes that diverge most."),
    speed: bool = typer.Option(True, "--speed/--no-speed", help="Time f32 and the result on each backend."),
    backends: str = typer.Option(None, "--backends", "-b", help="Backend specs to time (default: all available)."),
    iterations: opt.Iterations = 50,
    rounds: int = typer.Option(
        3, "--rounds", parser=opt.COUNT, help="f32 and the result alternate this many times (median p50)."
    ),
    ir: Path = typer.Option(None, "--ir", parser=file_out, help="Also write OpenVINO IR (.xml + .bin) here."),
    as_json: opt.Json = False,
    json_path: Path = typer.Option(
        None, "--json-file", parser=file_out, hidden=True, help="0.1's --json FILE (deprecated): use --json > FILE."
    ),
    seed: opt.Seed = 0,
) -> None:
    """Quantize a model to INT8 (QDQ, per-channel) or convert it to float16; measure what it costs and gains."""
    from deploykit.quantize import QuantizeSettings
    from deploykit.quantize import quantize as run_quantize

    check_outputs({"--output": output, "--json": json_path}, inputs={"model": model, "--calibrate": calibrate})
    settings = QuantizeSettings(
        fp16=fp16,
        engine=engine,
        method=method,
        calibration_size=calibration_size,
        held_out=held_out,
        max_drop=max_drop,
        exclude=tuple(_list(exclude)),
        quantize_head=quantize_head,
        per_channel=not per_tensor,
        debug_layers=debug_layers,
        measure_speed=speed,
        backends=tuple(_list(backends)) or None,
        iterations=iterations,
        rounds=rounds,
        seed=seed,
    )
    report = run_quantize(model, output, settings, calibrate=calibrate, evaluate_on=evaluate_on, ir=ir)
    if as_json:
        print_json(report.to_dict())
    else:
        _print(report)
    if json_path is not None:
        with atomic_path(json_path) as temporary:
            temporary.write_text(json.dumps(report.to_dict(), indent=2, default=str))
