"""Signals held while a compiled module initialises (see ``cli/launch.py``): a KeyboardInterrupt raised
inside a pybind11 module's start becomes an ImportError or aborts the process, so the handler runs
the moment the module is ready instead."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import signal
import sys
import threading
from collections.abc import Sequence
from types import FrameType, ModuleType
from typing import Any

from .launch import _NAMES

_held: list[int] = []
_depth = 0


def _hold(signum: int, frame: FrameType | None) -> None:
    _held.append(signum)


class _HeldSignals:
    """While the block runs in the main thread, the process's Python handlers for ``_NAMES`` only record
    the signal; at the end the handlers are back and the first signal held is handled there (a default or
    ignored disposition is left alone: the kernel acts on it as ever). Nested blocks hold until the outer
    one ends; in other threads it does nothing (handlers run in the main thread only)."""

    def __init__(self) -> None:
        self._saved: dict[int, Any] = {}
        self._active = False

    def __enter__(self) -> None:
        global _depth
        if threading.current_thread() is not threading.main_thread():
            return
        self._active = True
        _depth += 1
        if _depth > 1:
            return
        for signum in _NAMES:
            handler = signal.getsignal(signum)
            if callable(handler):
                self._saved[signum] = handler
                signal.signal(signum, _hold)

    def __exit__(self, *exc: object) -> None:
        global _depth
        if not self._active:
            return
        _depth -= 1
        if _depth:
            return
        for signum, handler in self._saved.items():
            if signal.getsignal(signum) is _hold:  # a module that set its own handler keeps it
                signal.signal(signum, handler)
        if _held:
            signum = _held[0]
            _held.clear()
            handler = self._saved.get(signum)
            if callable(handler):
                handler(signum, None)


class _HoldingLoader(importlib.abc.Loader):
    """A compiled module's loader, run with the signals held."""

    def __init__(self, loader: importlib.machinery.ExtensionFileLoader) -> None:
        self._loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        with _HeldSignals():
            return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        with _HeldSignals():
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


def held_signals() -> _HeldSignals:
    """A block during which the command's signals are held (see ``_HeldSignals``)."""
    return _HeldSignals()
