"""One table of backends by name, imported lazily, plus third-party plug-ins.

Built-in backends are listed here as ``module:Class`` strings so that listing
names never imports a runtime. Third-party packages add backends through the
``deploykit.backends`` entry-point group; an entry point names a ``Backend``
subclass. ``DEPLOYKIT_BACKENDS="name=module:Class;..."`` does the same without
packaging (isolated bench workers inherit it).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib.metadata import entry_points
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deploykit.errors import BackendError, UnknownBackendError

if TYPE_CHECKING:  # base.py looks backends up here (Session, kind refusals): the registry must not import it
    from deploykit.backends.base import Backend

BUILTIN_BACKENDS: dict[str, str] = {
    "onnxruntime": "deploykit.backends.onnxruntime:OnnxRuntimeBackend",
    "openvino": "deploykit.backends.openvino:OpenVinoBackend",
    "opencv": "deploykit.backends.opencv:OpenCvBackend",
    "ncnn": "deploykit.backends.ncnn:NcnnBackend",
    "mnn": "deploykit.backends.mnn:MnnBackend",
    "litert": "deploykit.backends.litert:LiteRtBackend",
    "reference": "deploykit.backends.reference:ReferenceBackend",
}
ENTRY_POINT_GROUP = "deploykit.backends"
DEFAULT_BACKEND = "onnxruntime"
"""The backend a command or function uses when none is named."""
REFERENCE_BACKEND = "reference"
"""The independent oracle a verification uses by default (``--oracle auto``)."""


def _load_class(target: str) -> type[Backend]:
    module_name, _, class_name = target.partition(":")
    backend_class: type[Backend] = getattr(importlib.import_module(module_name), class_name)
    return backend_class


ENVIRONMENT_VARIABLE = "DEPLOYKIT_BACKENDS"


@dataclass(frozen=True)
class _EnvironmentEntry:
    """A plug-in named in DEPLOYKIT_BACKENDS (``name=module:Class;...``), for unpackaged backends."""

    name: str
    value: str

    def load(self) -> object:
        return _load_class(self.value)

    def __str__(self) -> str:
        return f"{ENVIRONMENT_VARIABLE} {self.name}={self.value}"


def _plugin_targets() -> dict[str, object]:
    targets: dict[str, object] = dict(_entry_point_targets())
    for item in os.environ.get(ENVIRONMENT_VARIABLE, "").split(";"):
        name, sep, value = item.strip().partition("=")
        if sep and name and ":" in value:
            targets[name.strip().lower()] = _EnvironmentEntry(name.strip().lower(), value.strip())
    return targets


@cache
def _entry_point_targets() -> dict[str, object]:
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def backend_names() -> list[str]:
    """Every registered backend name: built-ins first, then plug-ins."""
    names = list(BUILTIN_BACKENDS)
    names += [n for n in sorted(_plugin_targets()) if n not in BUILTIN_BACKENDS]
    return names


def _aliases() -> dict[str, str]:
    """Alias → registered name, from each backend's own ``aliases`` (built-ins and plug-ins alike).

    Backend modules import their runtime lazily, so reading the classes is cheap; a plug-in
    that fails to load simply contributes no aliases here (its name still resolves).
    """
    table: dict[str, str] = {}
    for name in backend_names():
        try:
            backend_class = _backend_class(name)
        except Exception:
            continue
        for alias in getattr(backend_class, "aliases", ()):
            table.setdefault(alias.lower(), name)
    return table


def canonical_name(name: str) -> str:
    """The registered name for a name or alias (case-insensitive)."""
    key = name.strip().lower()
    if key in BUILTIN_BACKENDS or key in _plugin_targets():
        return key
    aliases = _aliases()
    if key in aliases:
        return aliases[key]
    raise UnknownBackendError(
        f"backend '{name}' | is not registered; known backends are "
        f"{', '.join(backend_names())} (aliases: {', '.join(f'{a}={n}' for a, n in aliases.items())}).",
        hint="check the spelling, or install the package that provides it.",
    )


def _backend_class(key: str) -> type[Backend]:
    if key in BUILTIN_BACKENDS:
        return _load_class(BUILTIN_BACKENDS[key])
    entry = _plugin_targets()[key]
    try:
        backend_class = entry.load()  # type: ignore[attr-defined]
    except Exception as exc:
        raise BackendError(
            f"backend '{key}' | its plug-in failed to load: {exc}.",
            hint=f"reinstall the package that provides entry point '{entry}'.",
        ) from exc
    if not (isinstance(backend_class, type) and getattr(backend_class, "is_deploykit_backend", False) is True):
        raise BackendError(
            f"backend '{key}' | entry point {entry} is not a deploykit Backend subclass.",
            hint="a plug-in must point to a class derived from deploykit.backends.Backend.",
        )
    return backend_class


@cache
def get_backend(name: str) -> Backend:
    """The backend registered under ``name`` or one of its aliases.

    Raises:
        UnknownBackendError: no backend is registered under that name.
    """
    return _backend_class(canonical_name(name))()


def default_backend() -> Backend:
    """The backend used where none is named: the first built-in one, ONNX Runtime (it runs every
    standard ONNX graph, QDQ INT8 and float16 included, on the CPU of any machine)."""
    return get_backend(next(iter(BUILTIN_BACKENDS)))


def model_files(path: Path, backend: str | None = None, options: Mapping[str, Any] | None = None) -> list[Path]:
    """Every file the model at ``path`` is made of, ``path`` first: as ``backend`` opens it with ``options``
    (``Backend.model_files``), or, with no backend named, as any registered backend that reads its format does."""
    chosen = [get_backend(backend)] if backend else [b for b in all_backends() if path.suffix.lower() in b.formats]
    files = [path]
    for found in chosen:
        files += [file for file in found.model_files(path, options or {}) if file not in files]
    return files


def all_backends() -> list[Backend]:
    """One instance of every registered backend, available or not."""
    return [get_backend(name) for name in backend_names()]
