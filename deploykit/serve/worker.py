"""A session in its own worker process, for models served with ``isolate=True``.

The replica is a resident worker of ``deploykit.workers`` (the one protocol every worker speaks):
its first job loads the model, each later job runs one request's feeds, arrays travelling as
bare bytes in a scratch folder of the parent's (in memory where the system has ``/dev/shm``).
A backend that aborts or segfaults ends only the worker: the parent sees it gone, with its signal,
and the model's runner marks the model not ready. Errors cross the boundary as data
(``error_result`` / ``rebuild_error``). The worker runs in its own session (a Ctrl-C at the
terminal reaches the server, which stops its replicas itself, in order) and, on Linux, dies with
the server's thread that started it.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from deploykit.backends.base import SessionInfo
from deploykit.errors import BackendError, DeployKitError, ModelUnavailableError
from deploykit.tensors import TensorSpec
from deploykit.workers import (
    ResidentWorker,
    error_result,
    read_raw_arrays,
    rebuild_error,
    resident_jobs,
    send_result,
    write_raw_arrays,
)

MODULE = "deploykit.serve.worker"


def _answer(session: Any, job: Mapping[str, Any]) -> tuple[Any, dict[str, Any]]:
    """The session (opened by the first job) and the result line of one job."""
    if session is None:
        from deploykit.sessions import load

        model = job["model"]
        session = load(model.get("bundle") or model["path"], model["backend"], model["device"], **model["options"])
        inputs = [spec.to_dict() for spec in session.inputs.values()]
        outputs = [spec.to_dict() for spec in session.outputs.values()]
        return session, {
            "status": "ready",
            "inputs": inputs,
            "outputs": outputs,
            "info": session.info.to_dict(),
            "metadata": dict(session.metadata),
        }
    outputs = session.run(read_raw_arrays(job["feeds"], job["layout"]))
    return session, {"status": "ok", "layout": write_raw_arrays(job["outputs"], outputs)}


def resident() -> int:
    """Load the model the first job names, then run each later job's feeds on it, until stdin closes."""
    session: Any = None
    try:
        for job in resident_jobs():
            try:
                session, result = _answer(session, job)
            except DeployKitError as exc:
                result = error_result(exc)
            except Exception as exc:  # a runtime's own exception: the request's error, not the replica's end
                result = error_result(BackendError(f"worker | {type(exc).__name__}: {exc}"))
            send_result(result)
    finally:
        if session is not None:
            session.close()
    return 0


def _memory_folder() -> str | None:
    """Where a request's arrays go: memory (``/dev/shm``) where the system has it, since creating a file
    on a disk costs milliseconds per request and in memory microseconds; else the temporary folder."""
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() and os.access(shm, os.W_OK | os.X_OK) else None


class IsolatedSession:
    """A session whose backend runs in a resident worker; ``run`` one call at a time.

    It offers what the serving runner uses of ``Session``: ``inputs``, ``outputs``, ``info``,
    ``metadata``, ``model_path``, ``run`` and ``close``. Start it from the thread that serves it
    (the worker dies with that thread).
    """

    def __init__(self, model: Mapping[str, Any], load_timeout_s: float) -> None:
        self._name = str(model["name"])
        self.model_path = Path(model["path"])
        self._scratch = Path(tempfile.mkdtemp(prefix=f"deploykit-serve-{self._name}-", dir=_memory_folder()))
        self._lock = threading.Lock()
        self._worker = ResidentWorker(MODULE, f"serve-{self._name}")
        try:
            outcome = self._worker.ask({"model": dict(model)}, load_timeout_s)
            if outcome.timed_out:
                raise ModelUnavailableError(
                    f"model '{self._name}' | its worker did not finish loading within {load_timeout_s:g} s; killed.",
                    hint="check the backend, or raise the load timeout.",
                )
            result = self._result(outcome.result, "while loading")
        except BaseException:
            self.close()
            raise
        self.inputs = {s["name"]: TensorSpec.from_dict(s) for s in result["inputs"]}
        self.outputs = {s["name"]: TensorSpec.from_dict(s) for s in result["outputs"]}
        self.info = SessionInfo.from_dict(result["info"])
        self.metadata: dict[str, str] = dict(result["metadata"])

    def _result(self, result: dict[str, Any] | None, when: str) -> dict[str, Any]:
        """The worker's answer, or the error it stands for: its own, sent as data, or its end."""
        if result is None:
            code = self._worker.exit_code
            how = f"signal {signal.Signals(-code).name}" if code is not None and code < 0 else f"exit code {code}"
            raise ModelUnavailableError(
                f"model '{self._name}' | its backend's worker process ended {when} ({how}); the model is not ready.",
                hint="the backend crashed on this model; try another backend or device.",
            )
        if result.get("status") == "error":
            raise rebuild_error(result["error_data"], BackendError)
        return result

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        with self._lock:
            feeds_path, outputs_path = self._scratch / "feeds.bin", self._scratch / "outputs.bin"
            job = {
                "feeds": str(feeds_path),
                "layout": write_raw_arrays(feeds_path, feeds),
                "outputs": str(outputs_path),
            }
            # a request has no time limit of its own here: the server's request timeout answers the client
            outcome = self._worker.ask(job, float("inf"))
            result = self._result(outcome.result, "while running a request")
            return read_raw_arrays(outputs_path, result["layout"])

    def close(self) -> None:
        self._worker.close()
        shutil.rmtree(self._scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(resident())
