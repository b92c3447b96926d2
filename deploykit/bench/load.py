"""A background load for measurements on a busy device: N busy threads, started and stopped by
deploykit around a benchmark or a search (``--background-load N``).

Each busy thread is a spin loop in its own Python process: a thread of this process would share the
GIL with the measuring loop and slow it in a way no app's decoder does, and a separate process is
what an edge app's video decoding or drawing looks like to the scheduler. The load only burns CPU;
it allocates nothing and touches no file. Nothing here measures.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from deploykit.errors import ResourceError, UsageError

KIND = "spin loop, one process per busy thread"
# The busy loop checks now and then that deploykit is still its parent: killed without a chance to
# stop its load (SIGKILL, or SIGTERM without a handler), deploykit leaves no spinning orphan behind.
_SPIN = "import os\nparent = os.getppid()\nwhile os.getppid() == parent:\n    for _ in range(200000):\n        pass\n"
_START_CHECK_S = 0.2  # a process that cannot run (ulimit, cgroup pids.max, seccomp) dies within this


def usable_cores() -> int:
    """The CPUs this process may run on (its affinity mask; the CPU count without one)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


@dataclass(frozen=True)
class BackgroundLoad:
    """How busy the device is kept while measuring.

    Attributes:
        threads: busy threads (0: idle, the default).
        kind: what a busy thread is (``KIND``).
    """

    threads: int = 0
    kind: str = KIND

    def __post_init__(self) -> None:
        check_background_load(self.threads)

    @property
    def idle(self) -> bool:
        return self.threads == 0

    def describe(self) -> str:
        """``with no added load`` or ``1 busy thread (spin loop, one process per busy thread)``: what deploykit
        added, never a claim that the machine was idle (other processes' load is not observed)."""
        if self.idle:
            return "with no added load"
        return f"{self.threads} busy thread{'s' if self.threads != 1 else ''} ({self.kind})"

    def to_dict(self) -> dict[str, Any]:
        return {"threads": self.threads, "kind": self.kind}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> BackgroundLoad:
        if not data:
            return cls()
        return cls(int(data.get("threads", 0)), str(data.get("kind", KIND)))


def check_background_load(threads: int, cores: int | None = None) -> None:
    """Refuse a load that is negative or leaves the model no core.

    Raises:
        UsageError: naming the count and this machine's usable cores.
    """
    cores = usable_cores() if cores is None else cores
    if threads < 0:
        raise UsageError(
            f"--background-load {threads} | expected 0 or more busy threads.", hint="e.g. --background-load 1."
        )
    if threads and threads >= cores:
        raise UsageError(
            f"--background-load {threads} | this machine has {cores} usable core{'s' if cores != 1 else ''}; "
            f"{threads} busy threads would leave the model none.",
            hint=f"use at most {cores - 1} here (a busy device, not a saturated one)."
            if cores > 1
            else "a 1-core machine can only be measured idle.",
        )


@contextmanager
def background_load(load: BackgroundLoad) -> Iterator[list[int]]:
    """Run ``load`` for the duration of the block; yields the busy processes' ids.

    Raises:
        ResourceError: a busy process could not start or died at once (process limit, cgroup), before
            anything was measured.
    """
    processes: list[subprocess.Popen[bytes]] = []
    try:
        for _ in range(load.threads):
            try:
                processes.append(
                    subprocess.Popen(
                        [sys.executable, "-S", "-c", _SPIN],
                        stdin=subprocess.DEVNULL,
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                    )
                )
            except OSError as exc:
                raise _cannot_start(load, f"{exc.strerror or exc}") from exc
        if processes:
            time.sleep(_START_CHECK_S)
        dead = [p for p in processes if p.poll() is not None]
        if dead:
            raise _cannot_start(load, f"a busy process exited at once with status {dead[0].returncode}")
        yield [p.pid for p in processes]
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
        for process in processes:
            process.wait()


def _cannot_start(load: BackgroundLoad, why: str) -> ResourceError:
    return ResourceError(
        f"--background-load {load.threads} | the load could not start: {why}.",
        hint="check the process limits (ulimit -u, the cgroup's pids.max), or measure idle without --background-load.",
    )
