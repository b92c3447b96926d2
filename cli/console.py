"""Shared terminal output for the CLI: one stdout and one stderr console."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from deploykit.errors import UsageError

# Wide tables stay readable in logs and pipes, where rich would otherwise assume 80 columns.
_WIDTH = None if sys.stdout.isatty() else 160
console = Console(highlight=False, width=_WIDTH)
err_console = Console(stderr=True, highlight=False, width=_WIDTH)


def print_json(data: Any) -> None:
    """Machine-readable output: plain JSON on stdout, no colour or wrapping."""
    typer.echo(json.dumps(data, indent=2, default=str))


def parse_pairs(values: list[str], what: str) -> dict[str, str]:
    """``["k=v", ...]`` → dict, with a clear error for an item without ``=``."""
    pairs: dict[str, str] = {}
    for value in values:
        key, sep, item = value.partition("=")
        if not sep or not key:
            raise UsageError(
                f"{what} '{value}' | expected KEY=VALUE.",
                hint=f"write it as {what} name=value.",
            )
        pairs[key.strip()] = item.strip()
    return pairs


def coerce(value: str) -> Any:
    """CLI option text → int, float, bool or str, in that order of preference."""
    lowered = value.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            continue
    return value


def input_files(values: list[str]) -> dict[str, str]:
    """The files named by ``-i NAME=file.npy`` / ``-i file.npz`` options, to keep outputs off them."""
    files: dict[str, str] = {}
    for value in values:
        _, sep, item = value.partition("=")
        path = item if sep else value
        try:
            if path and Path(path).is_file():
                files[f"-i {value}"] = path
        except OSError:  # a name the OS refuses: the input parser reports it
            continue
    return files
