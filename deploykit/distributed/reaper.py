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
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip


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


def watch(driver_pid: int, ray_package: str) -> None:
    """Follow the driver's Ray descendants until the driver is gone, then kill what remains of them."""
    import psutil

    try:
        driver = psutil.Process(driver_pid)
        started = driver.create_time()
    except psutil.Error:
        return
    seen: dict[int, float] = {}
    while True:
        try:
            alive = driver.is_running() and driver.create_time() == started and driver.status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            alive = False
        if not alive:
            break
        for pid, created in _tree(driver).items():
            if pid not in seen and pid != os.getpid():  # this watchdog names the ray folder too
                try:
                    if _is_ray(psutil.Process(pid), ray_package):
                        seen[pid] = created
                except psutil.Error:
                    continue
        for pid, created in list(seen.items()):
            try:
                process = psutil.Process(pid)
                if process.create_time() == created:
                    seen.update({k: v for k, v in _tree(process).items() if k != os.getpid()})
                    continue
            except psutil.Error:
                pass
            del seen[pid]
        time.sleep(POLL_S)
    leftovers: dict[int, float] = {}
    for pid, created in seen.items():
        try:
            process = psutil.Process(pid)
            if process.create_time() != created:
                continue
            leftovers[pid] = created
            leftovers.update(_tree(process))  # what it started since the last look
        except psutil.Error:
            continue
    leftovers.pop(os.getpid(), None)
    for pid, created in leftovers.items():
        try:
            process = psutil.Process(pid)
            if process.create_time() == created:
                process.send_signal(signal.SIGKILL)
        except psutil.Error:
            continue


if __name__ == "__main__":
    watch(int(sys.argv[1]), sys.argv[2])
