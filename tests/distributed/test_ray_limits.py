"""Ray under limits and signals (issue 21): a local Ray that cannot start under the process's limits is
refused up front with the limit named (not Ray's tracebacks half a minute later), and SIGTERM ends a Ray
run like any deploykit command — exit 143, no native stack dump, no Ray process left behind (nor after
SIGKILL)."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.assets.paths import darknet_image
from tests.assets.signals import default_signals

CLI = [sys.executable, "-c", "from deploykit.cli.main import main; main()"]


def _predict(detector: Path, photos: Path, out: Path, limits: str = "") -> subprocess.Popen[str]:
    command = " ".join([*(f"'{c}'" for c in CLI), "predict", str(detector), str(photos), "--engine", "ray", "--output",
                        str(out), "--actors", "1"])  # fmt: skip
    return subprocess.Popen(["bash", "-c", f"{limits}exec {command}"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True, preexec_fn=default_signals)  # fmt: skip


@pytest.mark.parametrize(
    "limits, message",
    [
        ("ulimit -n 64; ", "open files (ulimit -n) is 64, hard limit 64; a local Ray needs at least 1024"),
        ("ulimit -v 4000000; ", "address space (ulimit -v) is 3906 MiB; a local Ray needs at least 16384 MiB"),
        ("ulimit -f 100000; ", "file size (ulimit -f) is 97 MiB; a local Ray needs at least 1024 MiB"),
    ],
)
def test_a_local_ray_that_cannot_start_is_refused_naming_the_limit(ray_module, detector, photo_folder, tmp_path,
                                                                   limits, message):  # fmt: skip
    process = _predict(detector, photo_folder, tmp_path / "rows", limits)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 1, stderr
    assert f"error: ray (local) | cannot start under this process's limits: {message}" in " ".join(stderr.split())
    assert "Traceback" not in stderr + stdout and not (tmp_path / "rows").exists()


def test_a_soft_open_files_limit_is_raised_to_the_hard_one(ray_module):
    from deploykit.distributed.cluster import MIN_OPEN_FILES

    script = ("import resource; resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit("
              "resource.RLIMIT_NOFILE)[1])); from deploykit.distributed.cluster import check_local_limits; "
              "check_local_limits(); print(resource.getrlimit(resource.RLIMIT_NOFILE)[0])")  # fmt: skip
    soft = int(subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout)
    assert soft >= MIN_OPEN_FILES


def _ray_processes_of(session: int) -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter(["pid"]):
        try:
            if os.getsid(process.pid) == session:
                found.append(process)
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue
    return found


@pytest.mark.slow
@pytest.mark.parametrize(
    "signum, exit_code, when",
    [(signal.SIGTERM, 143, "running"), (signal.SIGKILL, -signal.SIGKILL, "running"),
     (signal.SIGKILL, -signal.SIGKILL, "starting")],
    ids=["TERM", "KILL", "KILL-during-ray.init"],
)  # fmt: skip
def test_a_signalled_ray_run_leaves_no_ray_process(ray_module, detector, photo_folder, tmp_path, signum, exit_code,
                                                    when):  # fmt: skip
    """SIGTERM: exit 143 without Ray's native stack dump. SIGKILL: no code runs in the driver, yet the reaper
    (deploykit.distributed.reaper) kills Ray's agents and workers that would outlive it, also while ray.init
    is still starting them."""
    process = _predict(detector, photo_folder, tmp_path / "rows")
    deadline = time.monotonic() + 90

    def ray_agents_started() -> bool:
        return any(" ".join(p.cmdline()).startswith("ray::") for p in _ray_processes_of(process.pid))

    while time.monotonic() < deadline:
        if when == "running" and list((tmp_path / "rows").glob("part-*.jsonl")):
            break  # Ray is up and rows are coming
        if when == "starting" and ray_agents_started():
            break  # ray.init has started its agents and has not returned: no row yet
        time.sleep(0.05)
    assert process.poll() is None, process.communicate()[1]
    started = _ray_processes_of(process.pid)
    assert any("raylet" in " ".join(p.cmdline()) for p in started), "Ray's processes run in the driver's session"
    assert any("ray::" in " ".join(p.cmdline()) for p in started)
    process.send_signal(signum)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == exit_code, stderr
    assert "SIGTERM received" not in stderr and "Traceback" not in stderr
    deadline = time.monotonic() + 20
    while _ray_processes_of(process.pid) and time.monotonic() < deadline:
        time.sleep(0.5)
    left = [" ".join(p.cmdline())[:80] for p in _ray_processes_of(process.pid)]
    assert not left, f"Ray processes outlived the driver: {left}"


# Ray's own log lines (a start-up notice, a token warning): anything else on stderr is deploykit's
RAY_LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+\s+(INFO|WARNING) \S+\.py:\d+ -- ")


def test_a_ray_run_shows_none_of_rays_own_start_up_notes(ray_module, detector, tmp_path):
    """The command's console has its own lines, not Ray's Python notes ("Started a local Ray instance", the
    token-authentication notice, Ray Data's execution plan, "Progress bars disabled"): six such lines came
    with every run. Ray's log files keep them."""
    photos = tmp_path / "photos"
    photos.mkdir()
    for index in range(4):
        shutil.copy(darknet_image("dog.jpg"), photos / f"{index}.jpg")
    process = _predict(detector, photos, tmp_path / "rows")
    stdout, stderr = process.communicate(timeout=600)
    assert process.returncode == 0, stderr
    assert not [text for text in stderr.splitlines() if RAY_LOG_LINE.match(text)], stderr
    assert "4 rows written" in stdout, stdout


def _driver_connecting(pid: int) -> bool:
    """Whether ray.init, in the driver, has made the driver's core worker (it opened its log file): the
    local Ray is up and the driver is connecting to it, and ray.init has not returned."""
    try:
        return any("python-core-driver-" in file.path for file in psutil.Process(pid).open_files())
    except psutil.Error:
        return False


@pytest.mark.slow
@pytest.mark.parametrize(
    "signum, line", [(signal.SIGINT, ["deploykit: stopped by Ctrl-C (SIGINT)."]), (signal.SIGTERM, [])],
    ids=["INT", "TERM"],
)  # fmt: skip
def test_a_signal_while_ray_init_connects_the_driver_is_the_shells_code(ray_module, detector, photo_folder, tmp_path,
                                                                      signum, line):  # fmt: skip
    """Ctrl-C or SIGTERM while ray.init connects the driver to the local Ray it has just started: the
    signal waits for ray.init, Ray is shut down in order, and the command ends with 130 (one line) or 143.
    Raised inside ray.init, a Ctrl-C left a half-made driver that Ray's exit hook shut down into a SIGSEGV,
    and a SIGTERM met Ray's own handlers (a native stack dump, then SIGABRT)."""
    process = _predict(detector, photo_folder, tmp_path / "rows")
    while process.poll() is None and not _driver_connecting(process.pid):
        time.sleep(0.01)
    assert process.poll() is None, process.communicate()[1]
    process.send_signal(signum)
    _, stderr = process.communicate(timeout=120)
    ours = [text for text in stderr.splitlines() if text.strip() and not RAY_LOG_LINE.match(text)]
    assert (process.returncode, ours) == (128 + signum, line), stderr
    deadline = time.monotonic() + 20
    while _ray_processes_of(process.pid) and time.monotonic() < deadline:
        time.sleep(0.5)
    left = [" ".join(p.cmdline())[:80] for p in _ray_processes_of(process.pid)]
    assert not left, f"Ray processes outlived the driver: {left}"
    assert not list((tmp_path / "rows").glob("part-*.jsonl"))


def test_a_local_ray_on_a_full_tmpdir_is_refused_at_once(ray_module, detector, photo_folder, tmp_path, full_disk):
    """Sweep 21c: tempfile.gettempdir() skips a full TMPDIR (its probe file cannot be written) and the
    check looked at /tmp, while Ray put its session in TMPDIR and timed out after 32 s."""
    with contextlib.suppress(OSError), open(full_disk / "fill", "wb") as handle:
        handle.write(b"\0" * 32768)
    process = _predict(detector, photo_folder, tmp_path / "rows", f"export TMPDIR='{full_disk}'; ")
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 1, stderr
    assert f"error: ray (local) | the temporary folder {full_disk} has 0 MiB free" in " ".join(stderr.split())
    assert "Traceback" not in stderr + stdout and not (tmp_path / "rows").exists()
