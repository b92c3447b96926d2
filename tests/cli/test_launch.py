"""The signal policy of the real ``deploykit`` command, from its first byte of start-up: Ctrl-C is exit 130
and one line, SIGTERM 143, never a traceback and never 0, whenever the signal comes (``cli/launch.py``,
``cli/main.py``)."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import deploykit
from deploykit.cli import launch

DEPLOYKIT = Path(sys.executable).with_name("deploykit")
# Delays after the process starts: inside the interpreter's start, the imports (typer, numpy, onnx) and,
# for the later ones, the command itself.
DELAYS_S = (0.0, 0.02, 0.05, 0.1, 0.2, 0.4, 0.8)
# Commands that take a while after their imports; the signal comes before, during or after them.
COMMANDS = (["backends"], ["inspect", "{model}"], ["bench", "{model}", "-n", "2000", "--warmup", "0"])


def _signalled(
    args: list[str], signum: int, delay_s: float, cwd: Path
) -> tuple[subprocess.CompletedProcess[str], bool]:
    """The command's run, and whether the signal was sent (not when the command had already ended)."""
    # The child starts with the default dispositions a shell gives it: a signal that arrives before exec
    # must not meet this test process's own handler (then it would be lost and the command run to 0).
    previous = signal.signal(signum, signal.SIG_DFL)
    try:
        process = subprocess.Popen(
            [str(DEPLOYKIT), *args], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
    finally:
        signal.signal(signum, previous)
    time.sleep(delay_s)
    if process.poll() is not None:  # done before the signal: nothing to judge but its own run
        stdout, stderr = process.communicate()
        return subprocess.CompletedProcess(args, process.returncode, stdout, stderr), False
    process.send_signal(signum)
    try:
        stdout, stderr = process.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        process.kill()
        stdout, stderr = process.communicate()
        pytest.fail(f"deploykit {' '.join(args)} ignored signal {signum} for 120 s:\n{stderr}")
    return subprocess.CompletedProcess(args, process.returncode, stdout, stderr), True


def _before_the_policy(stderr: str) -> bool:
    """A KeyboardInterrupt raised before deploykit's first statement: in the interpreter's own start (site
    and the environment's .pth files, e.g. an editable install's finder) or in the console script's import
    of the package files above ``cli/launch.py`` (``deploykit/__init__``, ``_version``, ``quiet``: the telemetry
    switches every importer gets) and its own imports (``os``, ``signal``, ``types``). Python reports
    a signal there its own way; docs/errors.md gives the window."""
    if "KeyboardInterrupt" not in stderr:
        return False
    if "Fatal Python error: init_import_site" in stderr:
        return True
    frames = re.findall(r'File "([^"]+)", line \d+, in (\S+)', stderr)
    package = Path(deploykit.__file__).parent
    cli = Path(launch.__file__).parent
    ours = (str(DEPLOYKIT), str(package), str(cli))
    above = (str(DEPLOYKIT), str(package / "__init__.py"), str(package / "_version.py"), str(package / "quiet.py"),
             str(cli / "__init__.py"))  # fmt: skip
    # Deploykit's own frames may only be the files above the policy and launch.py's own body (or its
    # install_start_policy); the standard library's imports below them are the interpreter's.
    return all(not path.startswith(ours) or path in above or (path == launch.__file__ and function in
               ("<module>", "install_start_policy")) for path, function in frames)  # fmt: skip


def _shell_status(returncode: int) -> int:
    """What a shell shows as $?: a death by signal N is 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.assets.tiny import build_all

    return build_all(tmp_path_factory.mktemp("launch"))["classifier"]


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("command", COMMANDS, ids=[c[0] for c in COMMANDS])
def test_a_signal_at_any_moment_of_start_up_is_one_line_and_the_shells_code(
    command: list[str], signum: int, model: Path, tmp_path: Path
) -> None:
    args = [part.format(model=model) for part in command]
    for delay_s in DELAYS_S:
        done, signalled = _signalled(args, signum, delay_s, tmp_path)
        said = f"deploykit {' '.join(args)}, signal {signum} after {delay_s} s: exit {done.returncode}\n{done.stderr}"
        if _before_the_policy(done.stderr):
            continue
        assert "Traceback" not in done.stderr + done.stdout, said
        assert "Aborted" not in done.stderr, said
        if not signalled:  # it had finished before the signal was due: nothing to judge but its own run
            assert done.returncode == 0 and done.stdout.strip(), said
            continue
        # A signal that met a runtime's compiled module as it loaded was once lost (exit 0, the backend
        # missing from the table) or aborted the process; a signalled command never exits 0.
        assert _shell_status(done.returncode) == 128 + signum, said
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        assert len(lines) <= 1, said
        if signum == signal.SIGINT and done.returncode > 0:
            assert lines == ["deploykit: stopped by Ctrl-C (SIGINT)."], said


def test_an_ignored_sigint_stays_ignored(tmp_path: Path) -> None:
    """``trap '' INT`` (or nohup for SIGHUP): the caller asked for the command to go on, so it does."""
    process = subprocess.Popen(
        [str(DEPLOYKIT), "backends"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    time.sleep(0.2)
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 0, stderr
    assert "onnxruntime" in stdout


_HOLD = r"""
import os, signal, sys
from deploykit.cli import holding
holding.hold_signals_while_compiled_modules_load()
import onnxruntime
calls = []
signal.signal(signal.SIGINT, lambda signum, frame: calls.append(frame))
with holding.held_signals():
    os.kill(os.getpid(), signal.SIGINT)
    sum(range(100_000))  # bytecode enough for a handler to have run, were it not held
    during = len(calls)
loader = sys.modules["onnxruntime.capi.onnxruntime_pybind11_state"].__spec__.loader
print(during, len(calls), calls[-1] is None if calls else "-", type(loader).__name__)
"""


def test_a_compiled_module_initialises_with_the_signals_held() -> None:
    """onnxruntime's pybind11 module runs Python (enums, typing) while it initialises. A KeyboardInterrupt
    raised there became an ImportError (the backend looked uninstalled and the command ran on to exit 0)
    or aborted the process (found under load: 2 of 21 Ctrl-Cs). The launcher loads every compiled module
    with the signals held: a signal in that time is handled the moment the module is ready."""
    done = subprocess.run([sys.executable, "-c", _HOLD], capture_output=True, text=True, timeout=300, check=True)
    during, after, no_frame, loader = done.stdout.split()
    assert (during, after, no_frame) == ("0", "1", "True"), done.stdout
    assert loader == "_HoldingLoader", f"onnxruntime's compiled module was loaded by {loader}, not held"
