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

DEPLOYKIT = Path(sys.executable).with_name("deploykit")
# Delays after the process starts: inside the interpreter's start, the imports (typer, numpy, onnx) and,
# for the later ones, the command itself.
DELAYS_S = (0.0, 0.02, 0.05, 0.1, 0.2, 0.4, 0.8)
# Commands that take a while after their imports; the signal comes before, during or after them.
COMMANDS = (["backends"], ["inspect", "{model}"], ["bench", "{model}", "-n", "2000", "--warmup", "0"])


def _signalled(args: list[str], signum: int, delay_s: float, cwd: Path) -> subprocess.CompletedProcess[str]:
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
    process.send_signal(signum)
    try:
        stdout, stderr = process.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        process.kill()
        stdout, stderr = process.communicate()
        pytest.fail(f"deploykit {' '.join(args)} ignored signal {signum} for 120 s:\n{stderr}")
    return subprocess.CompletedProcess(args, process.returncode, stdout, stderr)


def _before_the_policy(stderr: str) -> bool:
    """A KeyboardInterrupt raised before deploykit's first statement: in the interpreter's own start (site
    and the environment's .pth files, e.g. an editable install's finder) or in the console script's import
    of the package files above ``cli/launch.py`` and its own imports (``typing`` and ``signal``). Python reports
    a signal there its own way; docs/errors.md gives the window."""
    if "KeyboardInterrupt" not in stderr:
        return False
    if "Fatal Python error: init_import_site" in stderr:
        return True
    frames = re.findall(r'File "([^"]+)"', stderr)
    package = Path(deploykit.__file__).parent
    before = ("<", str(DEPLOYKIT), str(package / "__init__.py"), str(package / "_version.py"))
    # launch.py's own imports: once its main() has run, a signal can no longer raise anything
    return all(frame.startswith(before) or frame.endswith(("/typing.py", "cli/__init__.py", "cli/launch.py"))
               for frame in frames)  # fmt: skip


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
        done = _signalled(args, signum, delay_s, tmp_path)
        said = f"deploykit {' '.join(args)}, signal {signum} after {delay_s} s: exit {done.returncode}\n{done.stderr}"
        if _before_the_policy(done.stderr):
            continue
        assert "Traceback" not in done.stderr + done.stdout, said
        assert "Aborted" not in done.stderr, said
        if done.returncode == 0:  # only a command that had already finished its work
            assert done.stdout.strip() and not done.stderr.strip(), said
            continue
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
