"""Signals deferred through a critical section, and handled the moment it ends.

Some work must not be cut off halfway by a Python signal handler: a compiled module initialising (a
``KeyboardInterrupt`` raised inside a pybind11 module's start becomes an ``ImportError`` or aborts the
process; ``cli/holding.py``) or ``ray.init`` connecting a driver (``deploykit.distributed.cluster``).
``DeferredSignals`` makes the process's Python handlers only record SIGINT, SIGTERM and SIGHUP while its
block runs; at the end the handlers are back and the first signal recorded is handed to its handler.

This module imports the standard library only (the command's launcher uses it before anything heavy
loads), and knows nothing of the work it protects.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterable
from types import FrameType
from typing import Any

#: The signals that end a command: SIGINT, SIGTERM and, where the platform has it, SIGHUP.
TERMINATING: tuple[int, ...] = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)
)


class DeferredSignals:
    """A block during which the process's Python handlers of ``signums`` only record the signal.

    On entry, in the main thread, each signal with a Python handler gets a recorder instead (a default or
    ignored disposition is left alone: the kernel acts on it as ever; in other threads nothing changes,
    since handlers run in the main thread only). On exit each handler is back, unless the block installed
    its own (a module that set its own handler keeps it), and, with ``deliver_on_exit``, the first signal
    recorded is handed to the handler it was meant for (``deliver``). Blocks nest: an inner block hands
    its signal to the outer one's recorder, and the outer block delivers it.

    Attributes:
        held: the signals recorded so far, in the order they came.
    """

    def __init__(self, signums: Iterable[int] = TERMINATING, *, deliver_on_exit: bool = True) -> None:
        self.signums = tuple(signums)
        self.deliver_on_exit = deliver_on_exit
        self.held: list[int] = []
        self._saved: dict[int, Callable[[int, FrameType | None], Any]] = {}
        self._recorder = self._record  # one bound method, so that ``getsignal`` can tell it by identity

    def _record(self, signum: int, frame: FrameType | None) -> None:
        self.held.append(signum)

    def __enter__(self) -> DeferredSignals:
        if threading.current_thread() is not threading.main_thread():
            return self
        for signum in self.signums:
            handler = signal.getsignal(signum)
            if callable(handler):
                self._saved[signum] = handler
                signal.signal(signum, self._recorder)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self._saved.items():
            if signal.getsignal(signum) is self._recorder:
                signal.signal(signum, handler)
        if self.deliver_on_exit:
            self.deliver()

    def deliver(self) -> None:
        """Hand the first signal held to the handler that was in place when the block began, as the signal
        would have (with no frame), and forget the others; nothing when none came."""
        if not self.held:
            return
        signum = self.held[0]
        self.held.clear()
        handler = self._saved.get(signum)
        if callable(handler):
            handler(signum, None)
