"""A hanging backend costs one row after --timeout; SIGTERM or Ctrl-C of the command kills its workers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.assets.signals import default_signals
from tests.verify.test_verify import _conv

REPO = Path(__file__).resolve().parents[2]
PLUGINS = "hanger=tests.assets.crashing_backend:HangingBackend"
# How long a step may take before the test calls it hung.
HANG_S = 300


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    state = Path(f"/proc/{pid}/stat").read_text().split()[2] if Path(f"/proc/{pid}/stat").exists() else "X"
    return state != "Z"


def test_a_hanging_backend_is_an_error_row_after_the_timeout(tmp_path, monkeypatch):
    import deploykit

    monkeypatch.setenv("DEPLOYKIT_BACKENDS", PLUGINS)
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    model = _conv(tmp_path / "conv.onnx", [1, 3, 8, 8])
    report = deploykit.compare(model, ["hanger", "ort"], deploykit.VerifySettings(timeout_s=8))
    hung, ran = report.verdicts
    assert hung.status == "error" and "did not finish within 8 s and was killed (--timeout to change)" in hung.reason
    assert ran.status == "pass"


@pytest.mark.parametrize(("command", "signum"), [("bench", signal.SIGTERM), ("compare", signal.SIGINT)])
def test_a_signal_to_the_command_kills_its_workers(tmp_path, command, signum):
    model = _conv(tmp_path / "conv.onnx", [1, 3, 8, 8])
    pidfile = tmp_path / "worker.pid"
    env = {
        **os.environ,
        "DEPLOYKIT_BACKENDS": PLUGINS,
        "PYTHONPATH": str(REPO),
        "DEPLOYKIT_HANGER_PIDFILE": str(pidfile),
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "deploykit.cli.main", command, str(model), "-b", "hanger"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=default_signals,
    )  # fmt: skip
    # bounds against hangs, not speeds: on a loaded 2-core machine starting a worker (a Python that
    # imports the runtimes) can take minutes; the command must only still be running meanwhile
    deadline = time.monotonic() + HANG_S
    while not pidfile.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert pidfile.exists(), f"the worker never started (command exit {process.poll()})"
    worker = int(pidfile.read_text())
    process.send_signal(signum)
    _, stderr = process.communicate(timeout=HANG_S)
    assert process.returncode != 0 and "Traceback" not in stderr
    deadline = time.monotonic() + HANG_S
    while _alive(worker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(worker), "the worker outlived the command"


def test_a_worker_that_runs_long_is_said_while_it_runs(tmp_path, monkeypatch):
    """A long oracle and a hung backend look alike from outside: the command says which worker is
    still running, for how long, and when its limit stops it."""
    from typer.testing import CliRunner

    from deploykit import workers
    from deploykit.cli.main import app

    monkeypatch.setenv("DEPLOYKIT_BACKENDS", PLUGINS)
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    monkeypatch.setattr(workers, "SILENT_NOTICE_S", 1.0)
    monkeypatch.setattr(workers, "SILENT_NOTICE_EVERY_S", 2.0)
    model = _conv(tmp_path / "conv.onnx", [1, 3, 8, 8])
    result = CliRunner().invoke(app, ["compare", str(model), "-b", "hanger", "--timeout", "6"])
    assert result.exit_code == 1
    assert "warning: worker '" in result.stderr and "still running after" in result.stderr, result.stderr
    assert "it is stopped at 6 s (--timeout to change)" in result.stderr
    assert "did not finish within 6 s" in result.output
