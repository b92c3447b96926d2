"""``deploykit backends``: what runs on this machine, with versions, devices and why not."""

from __future__ import annotations

from typing import Any

import typer
from rich.markup import escape
from rich.table import Table

from deploykit.backends.options import as_spec
from deploykit.backends.registry import backend_names, get_backend
from deploykit.errors import DeployKitError

from . import options as opt
from .console import console, print_json


def backend_rows() -> list[dict[str, Any]]:
    rows = []
    for name in backend_names():
        try:
            backend = get_backend(name)
        except DeployKitError as exc:  # a plug-in that cannot load is one row, never the whole listing
            empty: dict[str, Any] = {"aliases": [], "version": None, "devices": [], "unavailable_devices": {}}
            rows.append(
                {"name": name, **empty, "available": False, "reason": str(exc), "options": {}, "option_schema": {}}
            )
            continue
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
    as_json: opt.Json = False,
    show_options: bool = typer.Option(False, "--options", help="Also list each backend's options."),
    check: bool = typer.Option(
        False,
        "--check",
        help="Open a small model on every backend × device × precision this machine claims, run it, judge it "
        "against onnx's reference evaluator and show what actually ran (exit 1 if any claim does not hold).",
    ),
) -> None:
    """List the backends, their versions and devices, and why a backend is unavailable."""
    if check:
        _check(as_json)
        return
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
            options = Table(title=f"{row['name']} options (-O KEY=VALUE)")
            for column in ("option", "type", "accepted", "default", "meaning"):
                options.add_column(column)
            for key, spec in row["option_schema"].items():
                default = "-" if spec["default"] is None else str(spec["default"]).lower()
                options.add_row(key, spec["type"], spec["accepted"], default, spec["doc"])
            console.print(options)


def _check(as_json: bool) -> None:
    from deploykit.verify.claims import check_claims

    report = check_claims()
    if as_json:
        print_json(report.to_dict())
    else:
        table = Table(title="deploykit backends --check: what each backend claims here, and what ran")
        for column in ("backend", "device", "claims", "asked", "ran", "verdict", "reason"):
            table.add_column(column)
        for row in report.rows:
            ran = row.ran or "-"
            ran_cell = ran if ran == row.precision else f"[red]{ran}[/]"
            colour = "green" if row.status == "pass" else "red"
            table.add_row(
                row.backend,
                row.device,
                ", ".join(row.claimed),
                row.precision,
                ran_cell,
                f"[{colour}]{row.status}[/]",
                escape(row.reason),
            )
        console.print(table)
        for note in report.notes:
            console.print(f"note: {escape(note)}", soft_wrap=True)
    if not report.ok:
        raise typer.Exit(1)
