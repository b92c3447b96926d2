"""``deploykit models``: the recipes in models/, and building one into a verified ONNX file."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

from . import options as opt
from .console import console, print_json
from .convert_cmd import DARKNET_ORACLE_HELP, REPORT_HELP
from .paths import file_out, folder_out, path_in

models_app = typer.Typer(
    help="Model recipes (models/recipes/*.toml): list them, build one.", invoke_without_command=True
)


@models_app.callback()
def list_models(
    ctx: typer.Context,
    as_json: opt.Json = False,
) -> None:
    """List the recipes (also 'deploykit models list')."""
    if ctx.invoked_subcommand is not None:
        return
    _print_recipes(as_json)


# The group's help says "list them": users type 'models list', so it is a command too.
@models_app.command("list")
def list_command(ctx: typer.Context, as_json: opt.Json = False) -> None:
    """List the recipes (the same as a bare 'deploykit models')."""
    group_json = bool(ctx.parent and ctx.parent.params.get("as_json"))  # 'models --json list'
    _print_recipes(as_json or group_json)


def _print_recipes(as_json: bool) -> None:
    from deploykit.recipes import list_recipes

    rows = [
        {
            "name": r.name,
            "task": r.task,
            "source": r.kind,
            "input": r.input["shape"],
            "description": r.description,
            "weights": r.weights_package,
            "available": r.unavailable_reason() is None,
            "reason": r.unavailable_reason(),
        }
        for r in list_recipes()
    ]
    if as_json:
        print_json(rows)
        return
    table = Table(title="deploykit model recipes (models/recipes)")
    for column in ("name", "task", "source", "input", "description", "weights from", "status"):
        table.add_column(column)
    for row in rows:
        status = "[green]ready[/]" if row["available"] else f"[yellow]{escape(str(row['reason']))}[/]"
        table.add_row(
            str(row["name"]),
            str(row["task"]),
            str(row["source"]),
            "x".join(map(str, row["input"])),
            escape(str(row["description"])),
            str(row["weights"] or "-"),
            status,
        )
    console.print(table)


@models_app.command("build")
def build_model(
    name: str = typer.Argument(..., help="Recipe name (see 'deploykit models')."),
    output: Path = typer.Option(None, "--output", "-o", parser=file_out, help="The .onnx file (default: NAME.onnx)."),
    weights: Path = typer.Option(
        None, "--weights", parser=path_in, help="Trained weights (Darknet .weights or a state_dict)."
    ),
    random_weights: bool = typer.Option(
        False, "--random-weights", help="Darknet recipes: generated weights (valid, but the model detects nothing)."
    ),
    verify_backends: str = typer.Option(
        None, "--verify-backends", help="Backends to verify on, comma-separated (default: all available; '' skips)."
    ),
    oracle: str = typer.Option("auto", "--oracle", help=f"Darknet recipes only. {DARKNET_ORACLE_HELP}"),
    report_dir: Path = typer.Option(None, "--report", parser=folder_out, help=REPORT_HELP),
) -> None:
    """Build a recipe into a verified ONNX file."""
    from deploykit.convert.darknet.oracles import check_oracle_choice
    from deploykit.recipes import build

    from .convert_cmd import finish, report_destination

    output = output or Path(f"{name}.onnx")
    with report_destination("models build", report_dir, inputs=[weights], output=output) as report_path:
        report = build(
            name,
            output,
            weights=weights,
            random_weights=random_weights,
            verify_backends=None
            if verify_backends is None
            else [b.strip() for b in verify_backends.split(",") if b.strip()],
            darknet_oracle=check_oracle_choice(oracle),
            report_path=report_path,
        )
    finish(report, report_path)
