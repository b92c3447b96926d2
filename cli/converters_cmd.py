"""``deploykit converters``: the environments third-party converters run in (onnx2tf + TensorFlow for
LiteRT): list them, create one in deploykit's cache, remove one."""

from __future__ import annotations

import typer
from rich.markup import escape
from rich.table import Table

from . import options as opt
from .console import console, err_console, print_json

converters_app = typer.Typer(
    help="Converter environments (onnx2tf + TensorFlow for LiteRT), kept apart from yours: list, add, remove.",
    no_args_is_help=True,
)


@converters_app.command("list")
def list_converters(as_json: opt.Json = False) -> None:
    """Every converter environment deploykit manages: its state, where it is and its main packages."""
    from deploykit.converters import ENVIRONMENTS, status

    statuses = [status(environment) for environment in ENVIRONMENTS.values()]
    if as_json:
        print_json([s.to_dict() for s in statuses])
        return
    table = Table(title="converter environments")
    for column in ("name", "state", "packages", "directory", "for"):
        table.add_column(column, overflow="fold")
    for row in statuses:
        packages = ", ".join(f"{name} {version}" for name, version in row.packages.items()) or "-"
        table.add_row(*(escape(x) for x in (row.name, row.state, packages, row.directory, row.purpose)))
    console.print(table)


@converters_app.command("add")
def add(name: str = typer.Argument(..., help="litert (onnx2tf + TensorFlow: ONNX → .tflite).")) -> None:
    """Create a converter environment in deploykit's cache from the pins deploykit ships (downloads the
    packages once; about 2.6 GB for litert). An environment that is ready is kept."""
    from deploykit.converters import create, get_environment

    environment = get_environment(name)
    if environment.state() == "ready":
        console.print(f"{escape(environment.name)} is ready ({escape(str(environment.directory))})")
        return
    err_console.print(
        f"creating {escape(environment.name)} in {escape(str(environment.directory))} "
        f"from {escape(environment.pins.name)} ..."
    )
    seconds = create(environment)
    console.print(f"{escape(environment.name)} ready in {seconds:.0f} s ({escape(str(environment.directory))})")


@converters_app.command("remove")
def remove(name: str = typer.Argument(..., help="litert.")) -> None:
    """Delete a converter environment (the conversions it made stay cached)."""
    from deploykit.converters import get_environment
    from deploykit.converters import remove as remove_environment

    environment = get_environment(name)
    if remove_environment(environment):
        console.print(f"removed {escape(environment.name)} ({escape(str(environment.directory))})")
    else:
        console.print(f"{escape(environment.name)} did not exist; nothing to remove")
