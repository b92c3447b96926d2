"""The served folders: which models the repository extension may load, and from where.

The served folders are the folders that hold the models the server started with (a bundle's parent
folder for a bundle). A model is loaded later only from them, by name: ``NAME.onnx`` or a bundle
folder ``NAME/``, whose real path must lie inside a served folder (a link that leads out is refused).
This module only looks at paths; it opens no model.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from deploykit.errors import RequestError
from deploykit.serve.config import ServedModel, is_model_name


def served_folders(models: Sequence[ServedModel]) -> tuple[Path, ...]:
    """The folders that hold the served models (a bundle's parent folder), in order, once each."""
    folders: dict[Path, None] = {}
    for model in models:
        folders.setdefault(Path(os.path.abspath(model.source)).parent, None)
    return tuple(folders)


def folder_list(folders: Sequence[Path]) -> str:
    """The folders for a message (the first five)."""
    return ", ".join(str(f) for f in folders[:5]) + (f" and {len(folders) - 5} more" if len(folders) > 5 else "")


def loadable_models(folders: Sequence[Path], served: Iterable[Path]) -> dict[str, Path]:
    """The models the folders hold, by name: ``NAME.onnx`` files and bundle folders (first folder
    first), other than the files in ``served`` (already served, maybe under another name)."""
    taken = {os.path.realpath(path) for path in served}
    found: dict[str, Path] = {}
    for folder in folders:
        for entry in _entries(folder):
            name = entry.name[: -len(".onnx")] if entry.name.endswith(".onnx") else entry.name
            if is_model_name(name) and name not in found and os.path.realpath(entry) not in taken:
                found[name] = entry
    return found


def check_inside(name: str, path: Path, folders: Sequence[Path]) -> None:
    """Refuse a model whose real path (links followed) lies outside every served folder.

    Raises:
        RequestError: naming the link and where it leads.
    """
    real = os.path.realpath(path)
    if not any(real.startswith(os.path.realpath(folder) + os.sep) for folder in folders):
        raise RequestError(
            f"model '{name}' | {path} leads to {real}, outside the served folders ({folder_list(folders)}); "
            "a model is loaded only from them.",
            hint="copy the model into a served folder instead of linking to it.",
        )


def _entries(folder: Path) -> list[Path]:
    """A folder's ``*.onnx`` files and bundle folders (those with a manifest), sorted by name."""
    from deploykit.optimize.bundle import MANIFEST

    def loadable(entry: Path) -> bool:
        try:
            return (entry.name.endswith(".onnx") and entry.is_file()) or (entry / MANIFEST).is_file()
        except OSError:  # a folder this user may not enter: not a model it can load
            return False

    try:
        entries = sorted(folder.iterdir())
    except OSError:
        return []
    return [entry for entry in entries if loadable(entry)]
