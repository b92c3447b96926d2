"""Ray's processes die with the driver that started them, however it ends.

A local Ray started by ``connect`` is shut down by ``ray.shutdown()`` when the driver ends normally,
by an exception, Ctrl-C or SIGTERM. A driver killed with SIGKILL runs no code: Ray's raylet notices and
exits, but processes it started (its dashboard and runtime-env agents, workers in the middle of a
task) are re-parented to init and live on. This watchdog, started in a session of its own just before
``ray.init``, looks at the driver's descendants several times a second and keeps those that are Ray's
(their command line runs from the installed ``ray`` package, or Ray titled them ``ray::...``) together
with whatever they start; when the driver is gone it kills what is left of them (each process checked by
its start time, so a recycled pid is never hit), then exits. Other children of the driver are not its
business. A kill during ``ray.init`` itself is covered too: the watch starts before Ray does.

Run as ``python -m deploykit.distributed.reaper DRIVER_PID RAY_PACKAGE_DIR``; ``start_reaper`` does that.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from typing import Any

POLL_S = 0.2


def start_reaper(ray_package: str, driver_pid: int | None = None) -> subprocess.Popen[bytes] | None:
    """Start the watchdog of the Ray processes (those run from ``ray_package``, the installed ``ray``
    folder) below ``driver_pid`` (this process by default); None where psutil is missing."""
    try:
        import psutil  # noqa: F401  (the watchdog needs it; without it there is no watchdog)
    except ImportError:
        return None
    return subprocess.Popen(
        [sys.executable, "-m", "deploykit.distributed.reaper", str(driver_pid or os.getpid()), ray_package],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def _tree(process: object) -> dict[int, float]:
    import psutil

    found: dict[int, float] = {}
    try:
        for child in process.children(recursive=True):  # type: ignore[attr-defined]
            try:
                found[child.pid] = child.create_time()
            except psutil.Error:
                continue
    except psutil.Error:
        pass
    return found


def _is_ray(process: Any, ray_package: str) -> bool:
    import psutil

    try:
        command = " ".join(process.cmdline())
    except psutil.Error:
        return False
    return command.startswith("ray::") or ray_package in command


def _same(pid: int, created: float) -> Any:
    """The process ``pid`` if it is still the one started at ``created`` (a recycled pid is not), else None."""
    import psutil

    try:
        process = psutil.Process(pid)
        return process if process.create_time() == created else None
    except psutil.Error:
        return None


def _running(pid: int, created: float) -> bool:
    import psutil

    process = _same(pid, created)
    try:
        return process is not None and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def watch(driver_pid: int, ray_package: str) -> None:
    """Follow the driver's Ray descendants until the driver is gone, then kill what remains of them."""
    import psutil

    try:
        driver = psutil.Process(driver_pid)
        started = driver.create_time()
    except psutil.Error:
        return
    me = os.getpid()  # this watchdog's command line names the ray folder too
    seen: dict[int, float] = {}
    while _running(driver_pid, started):
        for pid, created in _tree(driver).items():
            if pid not in seen and pid != me and (process := _same(pid, created)) and _is_ray(process, ray_package):
                seen[pid] = created
        for pid, created in list(seen.items()):
            if (process := _same(pid, created)) is None:
                del seen[pid]
            else:
                seen.update({k: v for k, v in _tree(process).items() if k != me})
        time.sleep(POLL_S)
    leftovers: dict[int, float] = {}
    for pid, created in seen.items():
        if (process := _same(pid, created)) is not None:
            leftovers[pid] = created
            leftovers.update(_tree(process))  # what it started since the last look
    leftovers.pop(me, None)
    for pid, created in leftovers.items():
        if (process := _same(pid, created)) is not None:
            with contextlib.suppress(psutil.Error):
                process.send_signal(signal.SIGKILL)


if __name__ == "__main__":
    watch(int(sys.argv[1]), sys.argv[2])
