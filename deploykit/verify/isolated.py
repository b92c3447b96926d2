"""Run a backend in its own worker process, so a crash or a hang costs one row, never the command.

Every backend run that is part of a verification (and every bench measurement) goes through
``run_worker``: a fresh interpreter that does not import from the current directory (an
unrelated ``onnx.py`` there must not shadow the real package), in its own process group (so a
timeout, Ctrl-C or SIGTERM of the parent kills the worker and anything it started), with a
time limit. The worker prints one result line; anything else it prints is kept for the error.
On Linux the worker also dies with its parent, even when the parent is killed with SIGKILL and
has no chance to kill it (see ``_BOOTSTRAP``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from deploykit.errors import DeployKitError
from deploykit.inputs import read_arrays, save_arrays

RESULT_PREFIX = "DEPLOYKIT-RESULT "
DEFAULT_TIMEOUT_S = 900.0
PIPES_GRACE_S = 2.0  # how long a finished worker's pipes may stay open (held by something it started)
# Run as `python -c _BOOTSTRAP <module> <parent pid>`, before the worker imports anything:
# - -c puts '' (the current directory) first on sys.path: it goes before any import, so an
#   unrelated ctypes.py or onnx.py there cannot shadow the real module.
# - On Linux, PR_SET_PDEATHSIG (prctl option 1) asks the kernel to SIGKILL the worker when its
#   parent dies: a parent killed with SIGKILL cannot kill its workers itself, and they would run
#   on until their time limit. (The signal comes when the parent *thread* that started the worker
#   ends; run_worker's thread waits in communicate() until the worker is gone, so that is the
#   parent's death.) If the parent died before prctl ran, no signal will ever come; the parent
#   pid has then changed, and the worker exits at once. Other systems have no such call: there
#   the time limit and kill_workers are all there is.
_BOOTSTRAP = """\
import sys
if sys.path and sys.path[0] == '':
    del sys.path[0]
import os
if sys.platform.startswith('linux'):
    import ctypes, signal
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != int(sys.argv[2]):
        sys.stderr.write(
            f'deploykit worker | its parent process (pid {sys.argv[2]}) exited before the worker started; '
            'expected it to wait for the result. Exiting.\\n'
        )
        os._exit(3)
del sys.argv[2]
import runpy
runpy.run_module(sys.argv[1], run_name='__main__', alter_sys=True)
"""


@dataclass(frozen=True)
class Interpreter:
    """The Python a worker runs in: this process's own, or another one (an aarch64 Python under
    user-mode QEMU, from ``deploykit.platforms``). The job protocol is the same for every one.

    Attributes:
        command: the argv that starts the interpreter (``-c <bootstrap> module pid`` follows);
            empty means ``sys.executable``.
        environment: variables set for the worker on top of this process's.
        platform: the platform the worker runs on, as rows name it (``host``, ``linux/arm64``).
    """

    command: tuple[str, ...] = ()
    environment: Mapping[str, str] = field(default_factory=dict)
    platform: str = "host"

    def argv(self) -> list[str]:
        return list(self.command) or [sys.executable]


HOST = Interpreter()


def error_result(exc: DeployKitError) -> dict[str, Any]:
    """A worker's ``DeployKitError`` as its result line carries it: the text, and the data to raise it again."""
    data = {"type": type(exc).__name__, "message": exc.message, "hint": exc.hint}
    return {"status": "error", "error": str(exc), "error_data": data}


def rebuild_error(data: Mapping[str, Any], default: type[DeployKitError] = DeployKitError) -> DeployKitError:
    """The error a worker's ``error_data`` describes, of its own class when deploykit has it (else ``default``)."""
    from deploykit import errors

    kind = getattr(errors, str(data.get("type")), None)
    if not (isinstance(kind, type) and issubclass(kind, DeployKitError)):
        kind = default
    return kind(str(data["message"]), hint=data.get("hint"))


@dataclass
class WorkerOutcome:
    """What a worker produced: its result object, or why there is none."""

    result: dict[str, Any] | None
    error: str | None = None
    stderr_tail: str = ""


def describe_exit(code: int) -> str:
    """``killed by signal SIGSEGV (exit code -11)`` or ``exited with code 3``."""
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name} (exit code {code})"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}"


_live: set[subprocess.Popen[str]] = set()
_live_lock = threading.Lock()


def _kill_group(process: subprocess.Popen[str]) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    process.wait()


def _end_group(process: subprocess.Popen[str]) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _end_group_after_exit(process: subprocess.Popen[str], answered: threading.Event) -> None:
    process.wait()
    if not answered.wait(PIPES_GRACE_S):
        _end_group(process)


def kill_workers() -> None:
    """Kill every worker this process started that is still running (and whatever they started):
    what an interrupted command does before it exits, so no worker outlives it."""
    with _live_lock:
        processes = list(_live)
    for process in processes:
        _kill_group(process)


def run_worker(
    module: str,
    job: Mapping[str, Any],
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    interpreter: Interpreter = HOST,
) -> WorkerOutcome:
    """Run ``python -m module`` (safely) with ``job`` as JSON on stdin; return its result line.

    ``interpreter`` says which Python runs it (this one by default). The worker and its children
    are killed when the time limit passes or when this process is interrupted (the interruption
    is then re-raised).
    """
    from deploykit.validation import check_number

    check_number("--timeout", timeout_s, low=0.0, low_open=True, hint="seconds a worker may take, e.g. --timeout 900.")
    environment = {**os.environ, **interpreter.environment} if interpreter.environment else None
    process = subprocess.Popen(
        [*interpreter.argv(), "-c", _BOOTSTRAP, module, str(os.getpid())],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env=environment,
    )
    with _live_lock:
        _live.add(process)
    answered = threading.Event()
    # A process the worker started (a factory's subprocess) inherits its output pipes: after the worker has
    # exited, such a child would keep communicate() waiting until the time limit. Once the worker is gone
    # and its pipes stay open for a moment, its process group goes (the result line is already written).
    threading.Thread(target=_end_group_after_exit, args=(process, answered), daemon=True).start()
    try:
        stdout, stderr = process.communicate(json.dumps(dict(job)), timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill_group(process)
        return WorkerOutcome(None, f"did not finish within {timeout_s:g} s and was killed (--timeout to change)")
    except BaseException:
        _kill_group(process)
        raise
    finally:
        answered.set()
        with _live_lock:
            _live.discard(process)
    _end_group(process)  # nothing the worker started outlives it
    lines = [line for line in stdout.splitlines() if line.startswith(RESULT_PREFIX)]
    tail = " | ".join(line.strip() for line in stderr.strip().splitlines()[-3:])
    if process.returncode != 0 or not lines:
        ended = describe_exit(process.returncode)
        reason = f"the isolated run {'was ' if process.returncode < 0 else ''}{ended}"
        if process.returncode == 0:
            ended = "exited with code 0 without printing a result"
            reason = f"the isolated run {ended}"
        return WorkerOutcome(None, reason + (f"; last output: {tail}" if tail else ""), tail)
    return WorkerOutcome(json.loads(lines[-1][len(RESULT_PREFIX) :]), None, tail)


@dataclass
class CandidateRun:
    """One backend's outputs on every input set, with what actually ran, or the reason it did not."""

    label: str
    info: dict[str, Any] | None = None
    outputs: list[dict[str, np.ndarray]] = field(default_factory=list)
    error: str | None = None
    error_data: dict[str, Any] | None = None
    """The worker's ``DeployKitError`` as data (type, message, hint); None for a crash or a timeout."""
    seconds: dict[str, Any] = field(default_factory=dict)
    """The worker's one pass: ``load`` and ``run`` (one per input set) seconds; no statistics."""
    platform: str = "host"

    @property
    def latency_ms(self) -> list[float]:
        """Milliseconds of each input set's run (one pass: what ``deploykit run`` prints)."""
        return [float(s) * 1e3 for s in self.seconds.get("run", [])]

    @property
    def ok(self) -> bool:
        return self.error is None

    def raise_error(self, model: str | os.PathLike[str]) -> None:
        """Raise what stopped the run as a ``DeployKitError``: the worker's own error, rebuilt from
        its data, or a ``BackendError`` naming the crash's signal or the timeout."""
        from deploykit import errors

        if self.error is None:
            return
        if self.error_data is not None:
            raise rebuild_error(self.error_data)
        raise errors.BackendError(
            f"backend '{self.label}' | crashed running '{Path(model).name}': {self.error}.",
            hint="the runtime itself failed (this is not an error in the model or the inputs); "
            "try another backend or device, and report it to the runtime's authors.",
        )


def run_candidate(
    model: str | os.PathLike[str],
    backend: str,
    device: str | None,
    cases: Sequence[Mapping[str, np.ndarray]],
    *,
    options: Mapping[str, Any] | None = None,
    label: str | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    isolate: bool = True,
    extra: Mapping[str, Any] | None = None,
    interpreter: Interpreter = HOST,
) -> CandidateRun:
    """Open ``model`` on ``backend:device`` and run every input set, in a worker process by default
    (always, when ``interpreter`` is another Python than this one).

    ``extra`` adds to the worker's job: ``allow_fallback``, or ``input_options`` and ``seed`` to
    have the worker make the one input set from the session's inputs (``deploykit run``)."""
    label = label or (f"{backend}:{device}" if device else backend)
    job: dict[str, Any] = {"model": str(model), "backend": backend, "device": device, "options": dict(options or {})}
    job.update(extra or {})
    if not isolate and interpreter == HOST:
        from deploykit.verify.worker import run_job

        result, outputs = run_job(job, list(cases))
        return CandidateRun(label, result.get("info"), outputs, result.get("error"), result.get("error_data"),
                            result.get("seconds") or {})  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="deploykit-verify-") as scratch:
        directory = Path(scratch)
        job["cases"] = []
        for index, feeds in enumerate(cases):
            path = directory / f"inputs-{index}.npz"
            save_arrays(path, feeds)
            job["cases"].append(str(path))
        job["outputs_dir"] = str(directory)
        outcome = run_worker("deploykit.verify.worker", job, timeout_s=timeout_s, interpreter=interpreter)
        where = interpreter.platform
        if outcome.result is None:
            return CandidateRun(label, error=outcome.error, platform=where)
        if outcome.result.get("status") != "ok":
            return CandidateRun(
                label, outcome.result.get("info"), error=outcome.result.get("error"),
                error_data=outcome.result.get("error_data"), platform=where,
            )  # fmt: skip
        outputs = []
        for path in sorted(directory.glob("outputs-*.npz"), key=lambda p: int(p.stem.split("-")[1])):
            outputs.append(read_arrays(path))
        return CandidateRun(label, outcome.result.get("info"), outputs, seconds=outcome.result.get("seconds") or {},
                            platform=where)  # fmt: skip
