"""Shared terminal output for the CLI: one stdout and one stderr console."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.text import Text

from deploykit.errors import UsageError
from deploykit.io import CONTROL_PICTURES, shown

if TYPE_CHECKING:
    from rich.progress import Progress

# The console keeps newline and tab (its own output has lines and columns); one-line fields from
# files go through deploykit.io.one_line, which pictures those too.
_CONTROL_PICTURES = {code: picture for code, picture in CONTROL_PICTURES.items() if chr(code) not in "\n\t"}


def sanitize(text: str) -> str:
    """``text`` with every control character but newline and tab replaced by a visible one."""
    return text.translate(_CONTROL_PICTURES)


def plain(name: object) -> str:
    """A file name or path inside a markup string: on one line, and never read as rich markup (a file
    named ``model[v2].onnx`` would print as ``model.onnx``)."""
    return escape(shown(str(name)))


class SafeConsole(Console):
    """A rich console that never writes a control character it was handed (rich's own styling
    escapes are added after this, when rendering)."""

    def render_str(self, text: str, **kwargs: Any) -> Text:
        return super().render_str(sanitize(text), **kwargs)

    def print(self, *objects: Any, **kwargs: Any) -> None:
        for item in objects:
            if isinstance(item, Text):
                item.plain = sanitize(item.plain)
        super().print(*objects, **kwargs)


# Wide tables stay readable in logs and pipes, where rich would otherwise assume 80 columns.
_WIDTH = None if sys.stdout.isatty() else 160
console = SafeConsole(highlight=False, width=_WIDTH)
err_console = SafeConsole(stderr=True, highlight=False, width=_WIDTH)


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
        if key.strip() in pairs:
            raise UsageError(
                f"{what} '{key.strip()}' | is given twice ({key.strip()}={pairs[key.strip()]} and {value}); "
                "expected each name once.",
                hint=f"keep one {what} {key.strip()}=...",
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


def step_bar(disable: bool = False) -> Progress:
    """The one bar a command shows while it works through counted steps (description, bar, done/total,
    time taken and left), on stderr, gone when it ends; ``disable`` for ``--json``. A command with a rate
    to show says it in the description."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=err_console,
        transient=True,
        disable=disable,
    )
