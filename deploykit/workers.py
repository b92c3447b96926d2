"""Worker processes: starting one, the job/result protocol, npz job files, exit codes and signals.

Every worker deploykit starts (verification and bench candidates, the torch stage, the Darknet
oracles, emulated platforms' probes) goes through ``run_worker``, or ``ResidentWorker`` for one that
stays for many jobs (a search's finalists, serving replicas): a fresh interpreter that does not
import from the current directory (an unrelated ``onnx.py`` there must not shadow the real
package), in its own process group (so a timeout, Ctrl-C or SIGTERM of the parent kills the worker
and anything it started), with a time limit. The protocol, for both sides:

- the parent sends one JSON job on stdin; arrays travel as ``.npz`` files named in the job
  (``write_arrays`` / ``read_arrays``), or, for a resident worker's many small jobs, as bare bytes
  with their layout in the job (``write_raw_arrays`` / ``read_raw_arrays``);
- the worker (``read_job``) answers with one result line (``send_result``); anything else it prints
  is kept for the error;
- a ``DeployKitError`` crosses as data (``error_result`` in the worker, ``rebuild_error`` in the
  parent: ``DeployKitError.to_dict`` / ``from_dict``), never as text parsed back;
- a crash is said by its signal or exit code (``describe_exit``).

On Linux the worker also dies with its parent, even when the parent is killed with SIGKILL and
has no chance to kill it (see ``_BOOTSTRAP``). This module runs jobs; it judges nothing.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from deploykit.errors import DeployKitError

RESULT_PREFIX = "DEPLOYKIT-RESULT "
DEFAULT_TIMEOUT_S = 900.0
#: A worker still running this long is said to be (a long oracle, a hung factory look alike from
#: outside: the user hears which one, and the limit), and again at every interval after.
SILENT_NOTICE_S = 30.0
SILENT_NOTICE_EVERY_S = 60.0
CLOSE_GRACE_S = 5.0  # how long a resident worker may take to exit once its stdin is closed
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


class WorkerSilentWarning(UserWarning):
    """A worker has been running for a long time without an answer (``deploykit`` prints it as one line)."""


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


def read_job() -> dict[str, Any]:
    """The job a worker was started with (JSON on its stdin)."""
    job: dict[str, Any] = json.loads(sys.stdin.read())
    return job


def send_result(result: Mapping[str, Any], stream: Any = None) -> None:
    """Print the worker's one result line (the last one counts) to standard output, or to ``stream``
    (a worker that hands its stdout to user code keeps a copy of the real one for this line)."""
    print(RESULT_PREFIX + json.dumps(dict(result)), file=stream or sys.stdout, flush=True)


def read_arrays(path: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """The arrays of an ``.npz`` job file by name, as ``write_arrays`` wrote them (never pickled; names
    too long for a zip member come back from the index they were stored by). Files from users go
    through ``deploykit.inputs.load_arrays``, which checks them first."""
    with np.load(path, allow_pickle=False) as archive:
        arrays = {name: archive[name] for name in archive.files}
    long_names = arrays.pop(_LONG_NAMES, None)
    if long_names is None:
        return arrays
    restored = {}
    for name, array in arrays.items():
        index = name.removeprefix(_LONG_NAME)
        restored[str(long_names[int(index)]) if index != name and index.isdigit() else name] = array
    return restored


def write_arrays(path: str | os.PathLike[str], arrays: Mapping[str, Any]) -> None:
    """Write arrays by name to an ``.npz`` job file, as ``.npz`` holds them without pickling: a
    sequence's tensors as ``name[0]``, ``name[1]`` ..., an empty optional left out, text in object
    arrays (ONNX Runtime's STRING outputs) as numpy text, and a name longer than a zip member's
    16-bit name field stored by index with the names beside."""
    named: dict[str, Any] = {}
    for name, value in arrays.items():
        if isinstance(value, list):
            named.update({f"{name}[{index}]": item for index, item in enumerate(value)})
        elif value is not None:
            named[name] = value
    stored: dict[str, Any] = {}
    long_names: list[str] = []
    for name, array in named.items():
        if len(name.encode("utf-8", "surrogateescape")) > _MEMBER_NAME_BYTES:
            stored[f"{_LONG_NAME}{len(long_names)}"] = _without_objects(array)
            long_names.append(name)
        else:
            stored[name] = _without_objects(array)
    if long_names:
        stored[_LONG_NAMES] = np.array(long_names, dtype=str)
    np.savez(path, **stored)


def write_raw_arrays(path: str | os.PathLike[str], arrays: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Write tensors by name as their bare bytes, one after another, and return the layout the reader
    needs (name, dtype, shape of each, in order): for a resident worker that answers many small jobs,
    where an ``.npz`` (a zip, its checksums) costs more than the job. Text arrays travel as numpy text;
    anything else not a fixed-size array (a sequence, an object array) is refused with ``TypeError``."""
    layout = []
    with open(path, "wb") as stream:
        for name, value in arrays.items():
            array = np.require(_without_objects(value), requirements="C")  # keeps a 0-d array 0-d
            if not isinstance(value, np.ndarray) or array.dtype.hasobject:
                raise TypeError(f"'{name}' is not a tensor of fixed-size items ({type(value).__name__})")
            stream.write(array.reshape(-1).view(np.uint8).data)
            layout.append({"name": name, "dtype": array.dtype.str, "shape": list(array.shape)})
    return layout


def read_raw_arrays(path: str | os.PathLike[str], layout: list[dict[str, Any]]) -> dict[str, np.ndarray]:
    """The tensors ``write_raw_arrays`` wrote, by name, as its ``layout`` describes them."""
    arrays = {}
    with open(path, "rb") as stream:
        for item in layout:
            array = np.empty(item["shape"], dtype=np.dtype(item["dtype"]))
            if array.size and stream.readinto(array.reshape(-1).view(np.uint8).data) != array.nbytes:
                raise ValueError(f"'{item['name']}': the file ends before its {array.nbytes} bytes")
            arrays[str(item["name"])] = array
    return arrays


_MEMBER_NAME_BYTES = 60000
_LONG_NAME, _LONG_NAMES = "__deploykit_long_name_", "__deploykit_long_names__"


def _without_objects(array: Any) -> Any:
    if isinstance(array, np.ndarray) and array.dtype == object and array.size:
        items = array.ravel().tolist()
        if all(isinstance(item, str) for item in items):
            return np.array(items, dtype=str).reshape(array.shape)
        if all(isinstance(item, bytes) for item in items):
            return np.array(items, dtype=bytes).reshape(array.shape)
    return array


def error_result(exc: DeployKitError) -> dict[str, Any]:
    """A worker's ``DeployKitError`` as its result line carries it: the text (for a row's reason)
    and the data to raise it again (``rebuild_error``)."""
    return {"status": "error", "error": str(exc), "error_data": exc.to_dict()}


def rebuild_error(data: Mapping[str, Any], default: type[DeployKitError] = DeployKitError) -> DeployKitError:
    """The error a worker's ``error_data`` describes, of its own class when deploykit has it (else ``default``)."""
    return default.from_dict(data)


@dataclass
class WorkerOutcome:
    """What a worker produced: its result object, or why there is none."""

    result: dict[str, Any] | None
    error: str | None = None
    stderr_tail: str = ""
    timed_out: bool = False  # the worker ran past its time limit and was killed (``error`` says so)


def describe_exit(code: int) -> str:
    """``killed by signal SIGSEGV (exit code -11)`` or ``exited with code 3``."""
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name} (exit code {code})"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}"


_live: set[subprocess.Popen[Any]] = set()
_live_lock = threading.Lock()


def _kill_group(process: subprocess.Popen[Any]) -> None:
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


def _say_while_silent(label: str, answered: threading.Event, timeout_s: float) -> None:
    """Warn while a worker runs with no answer: after ``SILENT_NOTICE_S``, then every
    ``SILENT_NOTICE_EVERY_S``, until it answers or its limit ends it."""
    started = time.monotonic()
    wait = SILENT_NOTICE_S
    while not answered.wait(wait):
        elapsed = time.monotonic() - started
        if elapsed >= timeout_s:
            return
        warnings.warn(
            f"worker '{label}' | still running after {elapsed:.0f} s with no answer yet; it is stopped at "
            f"{timeout_s:g} s (--timeout to change).",
            WorkerSilentWarning,
            stacklevel=1,
        )
        wait = SILENT_NOTICE_EVERY_S


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
    label = str(job.get("label") or job.get("backend") or module.rsplit(".", 1)[-1])
    threading.Thread(target=_say_while_silent, args=(label, answered, timeout_s), daemon=True).start()
    try:
        stdout, stderr = process.communicate(json.dumps(dict(job)), timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill_group(process)
        reason = f"did not finish within {timeout_s:g} s and was killed (--timeout to change)"
        return WorkerOutcome(None, reason, timed_out=True)
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


def resident_jobs() -> Iterator[dict[str, Any]]:
    """A resident worker's jobs: one JSON object per line of stdin, until the parent closes it."""
    for line in sys.stdin:
        if line.strip():
            job: dict[str, Any] = json.loads(line)
            yield job


class ResidentWorker:
    """A worker that stays for many jobs (``python -m module --resident``): one JSON line in, one result
    line out, each within its own time limit. A search's rounds use it so that a round costs what it
    measures, not a new process, a runtime's import and a model's load.

    Like ``run_worker``'s, it runs in its own session, dies with the thread that started it (so start it
    from the thread that uses it, and close it there) and is killed by ``kill_workers``; a job that
    overruns its limit, or a worker that dies, ends it: later jobs get the same reason.
    """

    def __init__(self, module: str, label: str, *, interpreter: Interpreter = HOST) -> None:
        import tempfile

        self.label = label
        self._stderr = tempfile.TemporaryFile(mode="w+", prefix="deploykit-worker-")
        environment = {**os.environ, **interpreter.environment} if interpreter.environment else None
        self._process = subprocess.Popen(
            [*interpreter.argv(), "-c", _BOOTSTRAP, module, str(os.getpid()), "--resident"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            start_new_session=True,
            env=environment,
        )
        with _live_lock:
            _live.add(self._process)
        self._buffer = b""
        self.ended: str | None = None

    def ask(self, job: Mapping[str, Any], timeout_s: float) -> WorkerOutcome:
        """Send one job and wait for its result line, at most ``timeout_s`` seconds."""
        if self.ended is not None:
            return WorkerOutcome(None, self.ended)
        process = self._process
        assert process.stdin is not None and process.stdout is not None
        try:
            process.stdin.write((json.dumps(dict(job)) + "\n").encode())
            process.stdin.flush()
        except (BrokenPipeError, OSError):
            return self._end(None)
        deadline = time.monotonic() + timeout_s
        descriptor = process.stdout.fileno()
        import selectors

        with selectors.DefaultSelector() as selector:
            selector.register(descriptor, selectors.EVENT_READ)
            while True:
                line, found, rest = self._buffer.partition(b"\n")
                if found:
                    self._buffer = rest
                    text = line.decode(errors="replace")
                    if text.startswith(RESULT_PREFIX):
                        return WorkerOutcome(json.loads(text[len(RESULT_PREFIX) :]), None)
                    continue  # a runtime's own print: not the answer
                left = deadline - time.monotonic()
                if left <= 0:
                    reason = f"did not answer within {timeout_s:g} s and was killed (--timeout to change)"
                    return self._end(reason, timed_out=True)
                if not selector.select(timeout=min(left, 0.2)):  # short waits: the main thread handles signals
                    continue
                block = os.read(descriptor, 65536)
                if not block:
                    return self._end(None)
                self._buffer += block

    @property
    def exit_code(self) -> int | None:
        """The worker's exit code once it has ended (negative: the signal that ended it), else None."""
        return self._process.poll()

    def _end(self, reason: str | None, *, timed_out: bool = False) -> WorkerOutcome:
        _kill_group(self._process)
        tail = self._stderr_tail()
        if reason is None:
            reason = f"the resident worker {describe_exit(self._process.returncode)}"
            reason += f"; last output: {tail}" if tail else ""
        self.ended = reason
        self.close()
        return WorkerOutcome(None, reason, tail, timed_out)

    def _stderr_tail(self) -> str:
        try:
            self._stderr.seek(0)
            lines = self._stderr.read().strip().splitlines()
        except (OSError, ValueError):
            return ""
        return " | ".join(line.strip() for line in lines[-3:])

    def close(self) -> None:
        """Close its stdin (it then exits), wait a moment, and kill whatever is left of its group."""
        process = self._process
        if process.stdin is not None and not process.stdin.closed:
            try:
                process.stdin.close()
            except OSError:
                pass
        try:
            process.wait(timeout=CLOSE_GRACE_S)
        except subprocess.TimeoutExpired:
            pass
        _kill_group(process)
        if process.stdout is not None:
            process.stdout.close()
        with _live_lock:
            _live.discard(process)
        self._stderr.close()
        self.ended = self.ended or "closed"

    def __enter__(self) -> ResidentWorker:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
