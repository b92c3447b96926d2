"""Atomic file output: write to a temporary file beside the target, then rename.

A failed or interrupted run never leaves a half-written file at the target and
never clobbers a good one.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from deploykit.errors import UsageError


def check_output_dir(path: Path) -> None:
    """Refuse an output whose directory does not exist, before any work is done."""
    parent = path.resolve().parent
    if not parent.is_dir():
        raise UsageError(
            f"output '{path}' | directory '{parent}' does not exist.",
            hint=f"create it first (mkdir -p {parent}) or choose another output path.",
        )
    if path.is_dir():
        raise UsageError(
            f"output '{path}' | is a directory, expected a file path.",
            hint="name the file to write, e.g. out/model.onnx.",
        )


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success rename it over ``path``.

    On an exception the temporary file is removed and ``path`` is left untouched.
    """
    target = Path(path)
    check_output_dir(target)
    handle, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(handle)
    temporary = Path(name)
    try:
        yield temporary
        os.replace(temporary, target)
    finally:
        if temporary.exists():
            temporary.unlink()
