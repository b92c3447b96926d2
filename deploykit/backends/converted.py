"""The converted-model cache: a backend that converts ONNX into its runtime's own format does it once
per model, converter and settings, into deploykit's cache, and reads it back from there.

An entry is a directory named by a digest of its key (the ONNX file's SHA-256, the converter's version
and the conversion options: whatever the converted files depend on) under ``cache_dir()/KIND``. It holds
the converter's files and ``entry.json``: the key, the SHA-256 of every file in the entry, and what the
backend chose to record about the conversion. An entry is built in a temporary directory beside it and
renamed into place under a lock file, so two processes converting the same model at once do one
conversion and leave one intact entry; an entry whose files do not match its ``entry.json`` is rebuilt.
A conversion that fails leaves nothing behind.

This module knows files and digests only; it never runs a converter or loads a runtime.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deploykit.cache import cache_dir
from deploykit.errors import UnsupportedModelError
from deploykit.io import file_lock, file_sha256

ENTRY_NAME = "entry.json"


@dataclass(frozen=True)
class CachedConversion:
    """One intact cache entry.

    Attributes:
        directory: the entry's directory (its files are the converter's output).
        key: what the conversion depended on (the entry is named by its digest).
        files: file name → SHA-256 of every file in the entry (``entry.json`` aside).
        record: what the backend recorded about the conversion when it was built.
        built: True when this call converted the model, False when the entry was found.
    """

    directory: Path
    key: dict[str, Any]
    files: dict[str, str]
    record: dict[str, Any] = field(default_factory=dict)
    built: bool = False

    def path(self, name: str) -> Path:
        return self.directory / name


def interface_file(model_file: Path) -> Path:
    """Where deploykit records a native model file's ONNX interface (names, types, shapes, metadata):
    the ``.json`` of the same name beside it, as ``export`` and bundles write it and the backends that
    read the format look for it."""
    return model_file.with_suffix(".json")


@dataclass(frozen=True)
class Carried:
    """A converted model written out to travel (in a bundle), so that it opens where nothing converts.

    Attributes:
        model_file: the file a session opens.
        files: every file written (the model file first; the ``.json`` that maps it to the ONNX interface).
        spent: the session options the conversion used up (LiteRT's ``weights``): the file carries them.
    """

    model_file: Path
    files: tuple[Path, ...]
    spent: tuple[str, ...] = ()


def entry_digest(key: Mapping[str, Any]) -> str:
    """The name of the entry for ``key``: a digest of its canonical JSON."""
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:32]


def converted(
    kind: str,
    key: Mapping[str, Any],
    build: Callable[[Path], Mapping[str, Any] | None],
    *,
    root: Path | None = None,
    usable: Callable[[CachedConversion], bool] | None = None,
) -> CachedConversion:
    """The entry for ``key``: from the cache, or made now by ``build``.

    Args:
        kind: the cache folder of the backend (``mnn``), under ``cache_dir()``.
        key: everything the converted files depend on (JSON-serialisable).
        build: writes the converted files into the empty directory it is given and returns what to
            record about them (or None); it raises a ``DeployKitError`` when the model cannot be converted.
        root: the cache directory for ``kind`` (default ``cache_dir()/kind``).
        usable: whether an intact entry holds what the backend needs (its record reads back); an entry it
            refuses is rebuilt like a damaged one. Default: every intact entry is usable.

    Raises:
        UnsupportedModelError: the cache cannot be written, or the entry is not intact once written.
        Whatever ``build`` raises.
    """
    root = root or cache_dir() / kind
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UnsupportedModelError(
            f"{kind} cache {root} | cannot be created: {exc.strerror or exc}.",
            hint="set DEPLOYKIT_CACHE_DIR to a writable directory.",
        ) from exc
    digest = entry_digest(key)
    final = root / digest
    found = read_entry(final, key, usable)
    if found is not None:
        return found
    with file_lock(root / f"{digest}.lock"):
        found = read_entry(final, key, usable)  # another process may have built it while we waited
        if found is not None:
            return found
        scratch = Path(tempfile.mkdtemp(prefix=f".{digest}-", dir=root))
        try:
            record = dict(build(scratch) or {})
            _write_entry(scratch, key, record)
            if final.exists():  # a corrupt entry: moved aside, then removed
                aside = Path(tempfile.mkdtemp(prefix=f".{digest}-corrupt-", dir=root))
                os.rename(final, aside / "entry")
                shutil.rmtree(aside, ignore_errors=True)
            os.rename(scratch, final)
        finally:
            if scratch.exists():
                shutil.rmtree(scratch, ignore_errors=True)
    built = read_entry(final, key, usable)
    if built is None:
        raise UnsupportedModelError(
            f"{kind} cache entry {final} | is not intact right after it was written.",
            hint="check the disk, or set DEPLOYKIT_CACHE_DIR to another directory.",
        )
    return CachedConversion(built.directory, built.key, built.files, built.record, built=True)


def _write_entry(directory: Path, key: Mapping[str, Any], record: Mapping[str, Any]) -> None:
    files = {
        path.name: file_sha256(path)
        for path in sorted(directory.iterdir())
        if path.is_file() and not path.is_symlink() and path.name != ENTRY_NAME
    }
    entry = {"key": dict(key), "files": files, "record": dict(record)}
    (directory / ENTRY_NAME).write_text(json.dumps(entry, indent=1, sort_keys=True))


def read_entry(
    directory: Path, key: Mapping[str, Any], usable: Callable[[CachedConversion], bool] | None = None
) -> CachedConversion | None:
    """The entry in ``directory`` when it is complete, for ``key``, its files are the ones it recorded
    and ``usable`` (when given) accepts it; else None."""
    try:
        entry = json.loads((directory / ENTRY_NAME).read_text())
        if entry["key"] != json.loads(json.dumps(dict(key))):
            return None
        files = {str(name): str(digest) for name, digest in entry["files"].items()}
        if not files or any(file_sha256(directory / name) != digest for name, digest in files.items()):
            return None
        record = dict(entry.get("record") or {})
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    found = CachedConversion(directory, dict(entry["key"]), files, record)
    return found if usable is None or usable(found) else None
