"""``deploykit backends``: what runs on this machine, with versions, devices and why not."""

from __future__ import annotations

from typing import Any

import typer
from rich.markup import escape
from rich.table import Table

from deploykit.backends.options import as_spec
from deploykit.backends.registry import all_backends

from .console import console, print_json


def backend_rows() -> list[dict[str, Any]]:
    rows = []
    for backend in all_backends():
        reason = backend.unavailable_reason()
        row: dict[str, Any] = {
            "name": backend.name,
            "aliases": list(backend.aliases),
            "available": reason is None,
            "version": None,
            "devices": [],
            "unavailable_devices": {},
            "reason": reason,
            "options": {name: as_spec(spec).doc for name, spec in backend.options.items()},
            "option_schema": {name: as_spec(spec).to_dict() for name, spec in backend.options.items()},
        }
        if reason is None:
            try:
                row["version"] = backend.version()
                row["devices"] = backend.devices()
                row["unavailable_devices"] = backend.unavailable_devices()
            except Exception as exc:  # a runtime that imports but cannot list devices
                row["available"] = False
                row["reason"] = f"{type(exc).__name__}: {exc}"
        rows.append(row)
    return rows


def backends(
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
    show_options: bool = typer.Option(False, "--options", help="Also list each backend's options."),
) -> None:
    """List the backends, their versions and devices, and why a backend is unavailable."""
    rows = backend_rows()
    if as_json:
        print_json(rows)
        return
    table = Table(title="deploykit backends")
    for column in ("backend", "aliases", "version", "devices", "status"):
        table.add_column(column)
    for row in rows:
        status = "[green]available[/]" if row["available"] else f"[red]unavailable[/]: {escape(row['reason'])}"
        table.add_row(
            row["name"],
            ", ".join(row["aliases"]),
            row["version"] or "-",
            ", ".join(row["devices"]) or "-",
            status,
        )
    console.print(table)
    for row in rows:
        for device, why in row["unavailable_devices"].items():
            console.print(f"[yellow]{row['name']}:{device} unavailable[/]: {escape(why)}", soft_wrap=True)
    if show_options:
        for row in rows:
            options = Table(title=f"{row['name']} options (-o KEY=VALUE)")
            for column in ("option", "type", "accepted", "default", "meaning"):
                options.add_column(column)
            for key, spec in row["option_schema"].items():
                default = "-" if spec["default"] is None else str(spec["default"]).lower()
                options.add_row(key, spec["type"], spec["accepted"], default, spec["doc"])
            console.print(options)
