"""Class-name files: one name per line, UTF-8 (a byte-order mark is dropped), blank lines skipped.

One reader for the converters (names stored in the model) and the vision pipelines, so a
missing, folder or binary labels file gives the same message everywhere.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from deploykit.errors import UsageError
from deploykit.io import regular_file_problem, shown


def read_labels(path: str | os.PathLike[str]) -> list[str]:
    """Class names from a text file, in order.

    Raises:
        UsageError: the file is missing, a folder, or not UTF-8 text.
    """
    file = Path(path)
    problem = regular_file_problem(file)
    if problem is not None:
        raise UsageError(
            f"labels '{shown(file)}' | {problem}.",
            hint="pass a text file with one class name per line (e.g. coco.names).",
        )
    data = file.read_bytes()
    try:
        text: str | None = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        text = None
    if text is None or "\x00" in text:
        raise UsageError(
            f"labels '{file}' | is a binary file, not UTF-8 text with one class name per line.",
            hint="pass the .names text file, not a model, weights or an image.",
        )
    return [line.strip() for line in text.splitlines() if line.strip()]


def class_index(name: str, labels: Sequence[str]) -> int | None:
    """The index of a class folder's name among ``labels``: exactly, ignoring case and '_' versus ' ',
    or as an integer index; None when it names no label."""
    key = name.lower().replace("_", " ")
    for index, label in enumerate(labels):
        if label.lower().replace("_", " ") == key:
            return index
    if name.isdigit() and int(name) < len(labels):
        return int(name)
    return None
