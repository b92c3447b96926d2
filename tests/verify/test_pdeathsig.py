"""A worker dies with its parent, even when the parent is killed with SIGKILL and cannot kill it (Linux)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from deploykit.workers import _BOOTSTRAP
from tests.verify.test_interrupts import PLUGINS, REPO, _alive
from tests.verify.test_verify import _conv

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")


def _wait_for(condition, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return condition()


@pytest.mark.parametrize("command", ["compare", "bench"])
def test_a_worker_dies_when_its_parent_is_killed_with_sigkill(tmp_path, command):
    """The command's own process (not a wrapper) starts the hanging worker through run_worker, then gets SIGKILL:
    no handler of the parent runs, so only the kernel's parent-death signal can end the worker before its timeout."""
    model = _conv(tmp_path / "conv.onnx", [1, 3, 8, 8])
    pidfile = tmp_path / "worker.pid"
    env = {
        **os.environ,
        "DEPLOYKIT_BACKENDS": PLUGINS,
        "PYTHONPATH": str(REPO),
        "DEPLOYKIT_HANGER_PIDFILE": str(pidfile),
    }
    parent = subprocess.Popen(
        [sys.executable, "-m", "deploykit.cli.main", command, str(model), "-b", "hanger", "--timeout", "600"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        assert _wait_for(pidfile.exists, 60), "the worker never started"
        worker = int(pidfile.read_text())
        assert _alive(worker)
        parent.kill()
        parent.wait(timeout=10)
        assert parent.returncode == -signal.SIGKILL
        assert _wait_for(lambda: not _alive(worker), 10), "the worker outlived its parent killed with SIGKILL"
    finally:
        parent.kill()
        if pidfile.exists() and _alive(worker := int(pidfile.read_text())):
            os.kill(worker, signal.SIGKILL)


def test_a_worker_whose_parent_is_already_gone_exits_at_once(tmp_path):
    """The race the parent-death signal leaves open: a parent that died before the worker asked for the signal.
    The worker is told to expect a parent pid that is not its parent's, as it would see after being orphaned."""
    not_my_parent = os.getpid() + 1 if os.getpid() + 1 != os.getppid() else os.getpid() + 2
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-c", _BOOTSTRAP, "deploykit.verify.worker", str(not_my_parent)],
        input="{}", capture_output=True, text=True, cwd=tmp_path, timeout=60,
    )  # fmt: skip
    assert result.returncode == 3 and result.stdout == ""
    assert result.stderr == (
        f"deploykit worker | its parent process (pid {not_my_parent}) exited before the worker started; "
        "expected it to wait for the result. Exiting.\n"
    )
    assert time.monotonic() - started < 30  # it did not wait for a job or a timeout


def test_the_bootstrap_hands_the_worker_its_arguments_and_ignores_the_current_directory(tmp_path):
    """The parent pid is off argv before the worker module runs, and '' is off sys.path before the first import."""
    here = tmp_path / "cwd"
    here.mkdir()
    for name in ("ctypes", "signal", "runpy"):
        (here / f"{name}.py").write_text("raise SystemExit('the current directory shadowed a module')\n")
    modules = tmp_path / "modules"
    modules.mkdir()
    (modules / "show_argv.py").write_text("import json, sys\nprint(json.dumps(sys.argv[1:]))\n")
    result = subprocess.run(
        [sys.executable, "-c", _BOOTSTRAP, "show_argv", str(os.getpid()), "--flag"],
        capture_output=True, text=True, cwd=here, env={**os.environ, "PYTHONPATH": str(modules)}, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == ["show_argv", "--flag"]
