"""The signal policy of the real ``deploykit`` command, from its first byte of start-up: Ctrl-C is exit 130
and one line, SIGTERM 143, never a traceback and never 0, whenever the signal comes (``cli/launch.py``,
``cli/main.py``)."""

from __future__ import annotations

import importlib.util
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import deploykit
from deploykit.cli import launch
from tests.assets.signals import default_signals

DEPLOYKIT = Path(sys.executable).with_name("deploykit")
# Delays after the process starts: inside the interpreter's start, the imports (typer, numpy, onnx) and,
# for the later ones, the command itself.
DELAYS_S = (0.0, 0.02, 0.05, 0.1, 0.2, 0.4, 0.8)
# Commands that take a while after their imports; the signal comes before, during or after them.
COMMANDS = (["backends"], ["inspect", "{model}"], ["bench", "{model}", "-n", "2000", "--warmup", "0"])


def _exiting(pid: int) -> bool:
    """Whether the process has begun to exit in the kernel (PF_EXITING in /proc/PID/stat's flags): from then
    on a signal changes nothing, and the exit code is the one the process already chose. Before it is
    reaped, a parent still sees it running. False where there is no /proc."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    flags = int(stat[stat.rindex(")") + 2 :].split()[6])
    return bool(flags & 0x4)


def _signalled(args: list[str], signum: int, delay_s: float, cwd: Path) -> tuple[subprocess.CompletedProcess[str], str]:
    """The command's run, and when the signal came: "never" (the command had ended before it was due),
    "running", or "at its exit" (the process was exiting in the kernel right after the signal was sent,
    so the signal may have come after it had chosen its code; seen on a loaded machine, 1 send in 200)."""
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
        return subprocess.CompletedProcess(args, process.returncode, stdout, stderr), "never"
    process.send_signal(signum)
    after_its_end = _exiting(process.pid)
    try:
        stdout, stderr = process.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        process.kill()
        stdout, stderr = process.communicate()
        pytest.fail(f"deploykit {' '.join(args)} ignored signal {signum} for 120 s:\n{stderr}")
    when = "at its exit" if after_its_end else "running"
    return subprocess.CompletedProcess(args, process.returncode, stdout, stderr), when


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
        done, when = _signalled(args, signum, delay_s, tmp_path)
        said = (f"deploykit {' '.join(args)}, signal {signum} after {delay_s} s ({when}): "
                f"exit {done.returncode}\n{done.stderr}")  # fmt: skip
        if _before_the_policy(done.stderr):
            continue
        assert "Traceback" not in done.stderr + done.stdout, said
        assert "Aborted" not in done.stderr, said
        finished = done.returncode == 0 and bool(done.stdout.strip())
        if when == "never":  # it had finished before the signal was due: nothing to judge but its own run
            assert finished, said
            continue
        # A signal that met a runtime's compiled module as it loaded was once lost (exit 0, the backend
        # missing from the table) or aborted the process; a signal at the interpreter's last steps was
        # lost too (exit 0). A command signalled while running never exits 0; one already exiting in the
        # kernel may have chosen 0 before the signal came, after its whole output.
        assert _shell_status(done.returncode) == 128 + signum or (when == "at its exit" and finished), said
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


_LEAVE = r"""
import os, signal, sys
from deploykit.cli import launch
launch.install_start_policy()
signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as under nohup
launch.leave_to_the_kernel()
print(signal.getsignal(signal.SIGINT) is signal.SIG_DFL, signal.getsignal(signal.SIGHUP) is signal.SIG_IGN, flush=True)
os.kill(os.getpid(), signal.SIGHUP)  # still ignored
os.kill(os.getpid(), int(sys.argv[1]))
print("survived", flush=True)
"""


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_at_the_end_the_kernel_ends_a_signalled_command(signum: int) -> None:
    """After the work, ``leave_to_the_kernel`` hands the signals to the kernel's default action: the
    interpreter's last steps run no bytecode, where a Python handler would have left the signal
    recorded and the exit 0. An ignored signal stays ignored."""
    done = subprocess.run([sys.executable, "-c", _LEAVE, str(signum)], capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["True", "True"], done.stdout + done.stderr
    assert done.returncode == -signum, done.stderr


_ARMED = r"""
import signal, sys
from deploykit.cli import holding
from deploykit.signals import DeferredSignals

holding.hold_signals_while_compiled_modules_load()
library, target, phase = sys.argv[1:]
original, fired = getattr(holding._HoldingLoader, phase), []


class _Armed(DeferredSignals):  # a Ctrl-C that came while the target module initialised
    def __enter__(self):
        super().__enter__()
        if not fired:
            fired.append(signal.SIGINT)
            self.held.append(signal.SIGINT)
        return self


def armed(self, argument):
    name = argument.name if phase == "create_module" else argument.__name__
    if name != target:
        return original(self, argument)
    real = holding.held_signals
    holding.held_signals = lambda deliver_on_exit=True: _Armed(holding._NAMES, deliver_on_exit=deliver_on_exit)
    try:
        return original(self, argument)
    finally:
        holding.held_signals = real


def interrupt(signum, frame):  # the command's own Ctrl-C handler once it runs: unwind
    raise KeyboardInterrupt


setattr(holding._HoldingLoader, phase, armed)
signal.signal(signal.SIGINT, interrupt)
try:
    __import__(library)
except KeyboardInterrupt:
    print("interrupted", len(fired), flush=True)
import gc

gc.collect()
print("unwound", flush=True)
"""

_COMPILED = [("onnx", "onnx.onnx_cpp2py_export"), ("onnxruntime", "onnxruntime.capi.onnxruntime_pybind11_state"),
             ("openvino", "openvino._pyopenvino"), ("ncnn", "ncnn.ncnn")]  # fmt: skip


@pytest.mark.parametrize("phase", ["create_module", "exec_module"])
@pytest.mark.parametrize(("library", "module"), _COMPILED, ids=[library for library, _ in _COMPILED])
def test_a_ctrl_c_held_through_a_compiled_modules_start_unwinds_without_a_crash(
    library: str, module: str, phase: str
) -> None:
    """A Ctrl-C held while a runtime's compiled module initialised is handed to the command's handler
    when the module is ready; the KeyboardInterrupt then unwinds the import, which drops the module it has
    just made. Freeing onnx's compiled module there crashed the process (SIGSEGV, exit 139, no line: CI,
    ``inspect`` signalled at 0.4 s). The module is kept: the interrupt reaches the importer, the process
    goes on, and its teardown ends it with 0."""
    if importlib.util.find_spec(library) is None:
        pytest.skip(f"{library} is not installed here")
    done = subprocess.run(
        [sys.executable, "-c", _ARMED, library, module, phase], capture_output=True, text=True, timeout=300
    )
    assert done.stdout.split() == ["interrupted", "1", "unwound"], f"exit {done.returncode}\n{done.stdout}{done.stderr}"
    assert done.returncode == 0, done.stderr


_IN_A_CALLBACK = r"""
import os, signal, sys, time, weakref
from deploykit.cli import main


class Thing:
    pass


def callback(reference):  # a signal handled here raises into a callback, where Python ignores it
    os.kill(os.getpid(), int(sys.argv[1]))
    sum(range(10_000))


main._install_signal_policy()
thing = Thing()
reference = weakref.ref(thing, callback)
try:
    del thing
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # the command's work goes on
        time.sleep(0.01)
    print("lost", flush=True)
except KeyboardInterrupt:
    print("interrupted", flush=True)
    raise SystemExit(130)
"""


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_handled_inside_a_callback_still_ends_the_command(signum: int) -> None:
    """A Python handler runs at the next bytecode, which can be a weakref callback or a ``__del__``; the
    exception it raises there is "ignored" by Python and the command went on to exit 0 (``backends``,
    SIGTERM during importlib's module-lock callback). The signal is sent again and ends the command."""
    done = subprocess.run(
        [sys.executable, "-c", _IN_A_CALLBACK, str(signum)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 128 + signum, f"exit {done.returncode}\n{done.stdout}{done.stderr}"
    assert "lost" not in done.stdout and "Exception ignored" not in done.stderr, done.stdout + done.stderr
    assert done.stdout.split() == (["interrupted"] if signum == signal.SIGINT else []), done.stdout


def test_a_ctrl_c_delivered_twice_at_once_still_unwinds(model: Path, tmp_path: Path) -> None:
    """``timeout -s INT`` signals the command and then its process group: the command gets the same Ctrl-C
    twice, milliseconds apart. That is not a second press: the unwinding runs to its end, and the benchmark's
    scratch folder and its output's lock file are removed."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {**os.environ, "TMPDIR": str(scratch), "DEPLOYKIT_CACHE_DIR": str(tmp_path / "cache")}
    command = [str(DEPLOYKIT), "bench", str(model), "-b", "onnxruntime", "-n", "200000", "--report", "report"]
    process = subprocess.Popen(
        command,
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_signals,
    )
    deadline = time.monotonic() + 120
    while not list(scratch.glob("deploykit-bench-*")) and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.5)  # its worker is measuring: the unwinding has a worker to stop
    assert process.poll() is None, process.communicate()[1]
    process.send_signal(signal.SIGINT)
    time.sleep(0.002)
    process.send_signal(signal.SIGINT)
    stderr = process.communicate(timeout=120)[1]
    assert _shell_status(process.returncode) == 128 + signal.SIGINT, stderr
    assert [line for line in stderr.splitlines() if line.strip()] == ["deploykit: stopped by Ctrl-C (SIGINT)."]
    assert sorted(path.name for path in scratch.iterdir()) == []
