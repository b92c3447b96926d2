"""Signals held while a compiled module initialises (see ``cli/launch.py``): a KeyboardInterrupt raised
inside a pybind11 module's start becomes an ImportError or aborts the process, so the handler runs
the moment the module is ready instead."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from deploykit.signals import DeferredSignals

from .launch import _NAMES


class _HoldingLoader(importlib.abc.Loader):
    """A compiled module's loader, run with the signals held."""

    def __init__(self, loader: importlib.machinery.ExtensionFileLoader) -> None:
        self._loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        with held_signals():
            return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        with held_signals():
            self._loader.exec_module(module)

    def __getattr__(self, name: str) -> Any:  # get_filename, is_package ... as the real loader
        return getattr(self._loader, name)


class _HoldingFinder(importlib.abc.MetaPathFinder):
    """First on ``sys.meta_path``: asks the other finders, and hands a compiled module's spec a loader
    that holds the signals."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec: importlib.machinery.ModuleSpec | None = finder.find_spec(fullname, path, target)
            if spec is None:
                continue
            if isinstance(spec.loader, importlib.machinery.ExtensionFileLoader):
                spec.loader = _HoldingLoader(spec.loader)
            return spec
        return None


def hold_signals_while_compiled_modules_load() -> None:
    """Every compiled module imported from now on initialises with SIGINT/SIGTERM/SIGHUP held."""
    if not any(isinstance(finder, _HoldingFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _HoldingFinder())


def held_signals() -> DeferredSignals:
    """A block during which the command's signals are held (``deploykit.signals.DeferredSignals``): their
    handlers only record them, and the first one is handled the moment the block ends."""
    return DeferredSignals(_NAMES)
