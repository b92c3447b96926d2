"""Ray's processes die with the driver that started them, however it ends.

A local Ray started by ``connect`` is shut down by ``ray.shutdown()`` when the driver ends normally,
by an exception, Ctrl-C or SIGTERM. A driver killed with SIGKILL runs no code: Ray's raylet notices and
exits, but processes it started (its dashboard and runtime-env agents, workers in the middle of a
task) are re-parented to init and live on. This watchdog, started in a session of its own next to the
driver, notes the process trees of Ray's node processes (gcs, raylet and what they start) twice a
second; when the driver is gone it kills what is left of them (each process checked by its start time,
so a recycled pid is never hit), then exits. Other children of the driver are not its business.

Run as ``python -m deploykit.distributed.reaper DRIVER_PID ROOT_PID...``; ``start_reaper`` does that.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

POLL_S = 0.5


def start_reaper(roots: list[int], driver_pid: int | None = None) -> subprocess.Popen[bytes] | None:
    """Start the watchdog of ``roots`` (Ray's node processes) for ``driver_pid`` (this process by default);
    None where there is nothing to watch or psutil is missing."""
    try:
        import psutil  # noqa: F401  (the watchdog needs it; without it there is no watchdog)
    except ImportError:
        return None
    if not roots:
        return None
    return subprocess.Popen(
        [sys.executable, "-m", "deploykit.distributed.reaper", str(driver_pid or os.getpid()), *map(str, roots)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip


def ray_node_processes(ray: object) -> list[int]:
    """The pids of the processes a local ``ray.init`` started (gcs, raylet, monitors ...); [] if unknown."""
    try:
        node = ray._private.worker._global_node  # type: ignore[attr-defined]
        return [info.process.pid for infos in node.all_processes.values() for info in infos if info.process]
    except AttributeError:
        return []


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


def watch(driver_pid: int, roots: list[int]) -> None:
    """Follow the trees of ``roots`` until the driver is gone, then kill what remains of them."""
    import psutil

    try:
        driver = psutil.Process(driver_pid)
        started = driver.create_time()
    except psutil.Error:
        return
    seen: dict[int, float] = {}
    for pid in roots:
        try:
            seen[pid] = psutil.Process(pid).create_time()
        except psutil.Error:
            continue
    while True:
        try:
            alive = driver.is_running() and driver.create_time() == started and driver.status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            alive = False
        if not alive:
            break
        for pid, created in list(seen.items()):
            try:
                process = psutil.Process(pid)
                if process.create_time() == created:
                    seen.update(_tree(process))
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
    for pid, created in leftovers.items():
        try:
            process = psutil.Process(pid)
            if process.create_time() == created:
                process.send_signal(signal.SIGKILL)
        except psutil.Error:
            continue


if __name__ == "__main__":
    watch(int(sys.argv[1]), [int(pid) for pid in sys.argv[2:]])
