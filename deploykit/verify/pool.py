"""Worker runs side by side in threads, waited for so that Ctrl-C and SIGTERM still stop the command.

Python runs signal handlers only in the main thread, between bytecodes. A signal the kernel delivers
to a pool thread (it may pick any thread) sets a flag but does not wake the main thread out of a
lock wait without a timeout (``Future.result()``, ``Thread.join()``), so KeyboardInterrupt would
wait until every worker finished, or until its time limit. Here every wait is cut into short
slices, and an interruption cancels what has not started and kills what runs before it re-raises.
This module must not judge anything: it only runs jobs and hands back their results.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor, wait
from types import TracebackType
from typing import Any, TypeVar

from deploykit.workers import kill_workers

T = TypeVar("T")

# Short enough that Ctrl-C feels immediate, long enough that waiting costs no CPU worth measuring.
POLL_S = 0.2


def wait_all(futures: list[Future[Any]]) -> None:
    """Wait until every future is done, in ``POLL_S`` slices so the main thread handles signals."""
    pending = {future for future in futures if not future.done()}
    while pending:
        _, pending = wait(pending, timeout=POLL_S)


class WorkerPool:
    """A thread pool for worker runs, used as a context manager.

    Worker processes run side by side, one per CPU; runs in this process (``isolate=False``) one at
    a time, since runtimes sharing a process must not load models concurrently. Leaving the block
    with an exception (Ctrl-C, SIGTERM) closes the pool: jobs not yet started are skipped, and the
    running workers are killed until no job runs, so no worker outlives the command.
    """

    def __init__(self, isolate: bool, jobs: int) -> None:
        workers = max(1, min(jobs, os.cpu_count() or 1)) if isolate else 1
        self._executor = ThreadPoolExecutor(max_workers=workers)
        self._futures: list[Future[Any]] = []
        self._state = threading.Condition()
        self._running = 0
        self._closed = False

    @property
    def closed(self) -> bool:
        """Whether the block was left with an exception (no job starts any more)."""
        return self._closed

    def submit(self, function: Callable[..., T], *args: Any, **kwargs: Any) -> Future[T]:
        """Start ``function(*args, **kwargs)`` in a pool thread (unless the pool is closed by then)."""
        future = self._executor.submit(self._guarded, function, *args, **kwargs)
        self._futures.append(future)
        return future

    def results(self, futures: list[Future[T]]) -> list[T]:
        """The futures' results in order, waiting interruptibly; a job's exception is raised."""
        wait_all(list(futures))
        return [future.result() for future in futures]

    def _guarded(self, function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        # The closed check and the count share one lock, so a job either starts before the pool
        # closes (and is waited for) or never starts, even if its future was lost to an interrupt.
        with self._state:
            if self._closed:
                raise CancelledError
            self._running += 1
        try:
            return function(*args, **kwargs)
        finally:
            with self._state:
                self._running -= 1
                self._state.notify_all()

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        if kind is None:
            wait_all(self._futures)
            self._executor.shutdown(wait=True)
            return
        with self._state:
            self._closed = True
        self._executor.shutdown(wait=False, cancel_futures=True)
        # A running job may start a worker between two kills: kill again until no job runs.
        while True:
            kill_workers()
            with self._state:
                if self._running == 0:
                    return
                self._state.wait(timeout=POLL_S)
