"""``deploykit inspect``: describe an ONNX file without running it."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table
from rich.text import Text

from deploykit.io import one_line
from deploykit.model import summarize

from . import options as opt
from .console import console, print_json
from .paths import path_in


def _size(num_bytes: int) -> str:
    value = float(num_bytes)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.1f} {unit}" if unit != "B" else f"{int(value)} B"
        value /= 1024
    return f"{value:.1f} GiB"


METADATA_PREVIEW_CHARS = 120


def shorten(value: str, limit: int = METADATA_PREVIEW_CHARS) -> str:
    """A metadata value on one line: long or multi-line values cut, with their full size; a CR or tab
    inside it shown as its picture (``io.one_line``), so that it cannot forge or overwrite a line."""
    lines = value.count("\n") + 1
    first = one_line(value.split("\n", 1)[0], None)
    if lines == 1 and len(value) <= limit:
        return first
    size = f"{len(value):,} characters" + (f", {lines:,} lines" if lines > 1 else "")
    return f"{first[:limit]}… ({size}; --full shows all)"


def inspect(
    model: Path = typer.Argument(..., parser=path_in, help="The .onnx file, or a Darknet .cfg."),
    as_json: opt.Json = False,
    input_size: str = typer.Option(None, "--input-size", help="Darknet: WIDTHxHEIGHT instead of the cfg's."),
    full: bool = typer.Option(False, "--full", help="Show long metadata values whole (default: truncated)."),
) -> None:
    """ONNX: opset, producer, inputs/outputs (dynamic dims), op histogram, params, size.
    Darknet .cfg: the layer table (index, type, output shape, parameters), as Darknet prints it."""
    if model.suffix.lower() == ".cfg":
        _inspect_darknet(model, as_json, input_size)
        return
    summary = summarize(model)
    if as_json:
        print_json(summary.to_dict())
        return
    console.print(Text(one_line(summary.path, None), style="bold"))
    size = _size(summary.size_bytes)
    if summary.external_data_bytes:
        size += f" + {_size(summary.external_data_bytes)} external data"
    opsets = ", ".join(f"{d} {v}" for d, v in summary.opsets.items())
    console.print(f"  size        {size}")
    console.print(f"  ir / opset  {summary.ir_version} / {opsets}")
    console.print(Text(f"  producer    {one_line(summary.producer) if summary.producer else '-'}"))
    console.print(f"  parameters  {summary.parameter_count:,} ({summary.precision})")
    console.print(f"  nodes       {summary.node_count}")
    for key, value in summary.metadata.items():
        console.print(Text(f"  meta        {one_line(key)} = {value if full else shorten(value)}"))
    io_table = Table(title="inputs and outputs")
    for column in ("kind", "name", "dtype", "shape"):
        io_table.add_column(column)
    for kind, specs in (("input", summary.inputs), ("output", summary.outputs)):
        for spec in specs:
            io_table.add_row(kind, Text(one_line(spec.name)), spec.dtype.name, Text(one_line(spec.shape_text())))
    console.print(io_table)
    ops = Table(title="operators")
    ops.add_column("op")
    ops.add_column("count", justify="right")
    for op, count in summary.op_histogram.items():
        ops.add_row(Text(one_line(op)), str(count))
    console.print(ops)


def _inspect_darknet(cfg: Path, as_json: bool, input_size: str | None) -> None:
    from deploykit.convert.darknet.convert import load_network, parse_size

    net = load_network(cfg, parse_size(input_size) if input_size else None)
    rows = [layer.to_dict() for layer in net.layers]
    if as_json:
        print_json(
            {
                "cfg": str(cfg),
                "input": [net.channels, net.height, net.width],
                "stride": net.stride(),
                "parameters": net.parameter_count,
                "layers": rows,
            }
        )
        return
    table = Table(
        title=f"{cfg.name}: input {net.width}x{net.height}x{net.channels}, stride {net.stride()}, "
        f"{net.parameter_count:,} parameters"
    )
    for column in ("layer", "type", "detail", "input", "output", "params"):
        table.add_column(column, justify="right" if column in ("layer", "params") else "left")
    for row in rows:
        c_in, h_in, w_in = row["input"]
        c_out, h_out, w_out = row["output"]
        table.add_row(
            str(row["index"]),
            row["type"],
            row["detail"],
            f"{w_in}x{h_in}x{c_in}",
            f"{w_out}x{h_out}x{c_out}",
            f"{row['parameters']:,}",
        )
    console.print(table)
