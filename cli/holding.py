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

#: Compiled modules whose import a held signal ended, never freed (see ``_deliver``).
_KEPT: list[ModuleType] = []


def _deliver(held: DeferredSignals, module: ModuleType | None) -> None:
    """Hand a signal held while ``module`` initialised to its handler. The handler may raise (Ctrl-C once
    the command runs), and the import then drops the module it has just made; freeing a compiled module
    right after its start crashed the process (onnx's: SIGSEGV in its module's dealloc, no line, exit 139,
    found on CI's loaded machine). So such a module is kept, with a reference nothing ever releases."""
    if held.held and module is not None:
        _KEPT.append(module)  # alive while the command unwinds
        try:  # and through the interpreter's teardown, which would free the list (numpy has loaded ctypes)
            import ctypes

            ctypes.pythonapi.Py_IncRef(ctypes.py_object(module))
        except (ImportError, AttributeError):  # ctypes missing, or mid-import itself under a second signal
            pass
    held.deliver()


class _HoldingLoader(importlib.abc.Loader):
    """A compiled module's loader, run with the signals held."""

    def __init__(self, loader: importlib.machinery.ExtensionFileLoader) -> None:
        self._loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        with held_signals(deliver_on_exit=False) as held:
            module = self._loader.create_module(spec)
        _deliver(held, module)
        return module

    def exec_module(self, module: ModuleType) -> None:
        with held_signals(deliver_on_exit=False) as held:
            self._loader.exec_module(module)
        _deliver(held, module)

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


def held_signals(*, deliver_on_exit: bool = True) -> DeferredSignals:
    """A block during which the command's signals are held (``deploykit.signals.DeferredSignals``): their
    handlers only record them, and the first one is handled the moment the block ends (with
    ``deliver_on_exit``; else when ``deliver`` is called)."""
    return DeferredSignals(_NAMES, deliver_on_exit=deliver_on_exit)
