"""``deploykit inspect``: describe an ONNX file without running it."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from deploykit.model import summarize

from .console import console, print_json


def _size(num_bytes: int) -> str:
    value = float(num_bytes)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.1f} {unit}" if unit != "B" else f"{int(value)} B"
        value /= 1024
    return f"{value:.1f} GiB"


def inspect(
    model: Path = typer.Argument(..., help="The .onnx file."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of tables."),
) -> None:
    """Show opset, producer, inputs/outputs (with dynamic dims), op histogram, params and size."""
    summary = summarize(model)
    if as_json:
        print_json(summary.to_dict())
        return
    console.print(f"[bold]{summary.path}[/]")
    size = _size(summary.size_bytes)
    if summary.external_data_bytes:
        size += f" + {_size(summary.external_data_bytes)} external data"
    opsets = ", ".join(f"{d} {v}" for d, v in summary.opsets.items())
    console.print(f"  size        {size}")
    console.print(f"  ir / opset  {summary.ir_version} / {opsets}")
    console.print(f"  producer    {summary.producer or '-'}")
    console.print(f"  parameters  {summary.parameter_count:,} ({summary.precision})")
    console.print(f"  nodes       {summary.node_count}")
    for key, value in summary.metadata.items():
        console.print(f"  meta        {key} = {value}")
    io_table = Table(title="inputs and outputs")
    for column in ("kind", "name", "dtype", "shape"):
        io_table.add_column(column)
    for kind, specs in (("input", summary.inputs), ("output", summary.outputs)):
        for spec in specs:
            io_table.add_row(kind, spec.name, spec.dtype.name, spec.shape_text())
    console.print(io_table)
    ops = Table(title="operators")
    ops.add_column("op")
    ops.add_column("count", justify="right")
    for op, count in summary.op_histogram.items():
        ops.add_row(op, str(count))
    console.print(ops)
