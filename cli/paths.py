"""Path arguments read as the user typed them.

Typer turns ``newdir/`` into ``Path("newdir")`` and ``''`` into ``Path(".")``: the trailing slash that
says "a folder" and the emptiness that says "nothing" are gone before a command sees them, so
``--save newdir/`` wrote a *file* named ``newdir`` and ``--report ''`` wrote into the current directory.
Every path parameter of the CLI is therefore parsed here from its text (``parser=``), by what it is:

- ``path_in``: something the command reads, a file or a folder;
- ``file_out``: a file the command writes;
- ``folder_out``: a folder the command writes into.

A bad value is a usage error (exit 2) that says what was typed and what was expected.
"""

from __future__ import annotations

import os
from pathlib import Path

import typer


def _common(text: str) -> str:
    if not isinstance(text, str):  # a default (None or a Path) arrives as it is
        return text
    if not text.strip():
        raise typer.BadParameter(f"{text!r} is empty; expected a path (use '.' for the current folder).")
    if "\x00" in text:
        raise typer.BadParameter("the path holds a NUL character, which no file name can hold.")
    return text


def _names_folder(text: str) -> bool:
    return text.endswith((os.sep, f"{os.sep}.")) or text in (".", "..")


def path_in(text: str) -> Path:
    """A file or folder to read. ``model.onnx/`` says "the folder model.onnx": refused when it is a file."""
    text = _common(text)
    if isinstance(text, str) and _names_folder(text):
        stripped = Path(text)
        if stripped.exists() and not stripped.is_dir():
            raise typer.BadParameter(
                f"'{text}' ends with '/', so it names a folder, but {stripped} is a file; drop the '/'."
            )
    return Path(text)


def file_out(text: str) -> Path:
    """A file to write: a name ending in '/' (a folder) is refused instead of becoming a file of that name."""
    text = _common(text)
    if isinstance(text, str) and _names_folder(text):
        folder = text if text.endswith(os.sep) else f"{text}{os.sep}"  # '.', '..' and 'out/.' name folders too
        why = f"ends with '{os.sep}', so it names a folder" if text.endswith(os.sep) else "names a folder"
        raise typer.BadParameter(f"'{text}' {why}; expected a file path such as {folder}FILE.")
    return Path(text)


def folder_out(text: str) -> Path:
    """A folder to write into (new or existing)."""
    return Path(_common(text))
