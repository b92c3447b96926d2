"""A session in its own worker process, for models served with ``isolate=True``.

The worker loads the model once and then answers feeds over a pipe until told to stop. A backend
that aborts or segfaults ends only the worker: the parent sees the pipe close, and the model's
runner marks the model not ready. Errors cross the boundary as data (``DeployKitError.to_dict``),
never as text parsed back. On Linux the worker dies with the server (``PR_SET_PDEATHSIG``), so a
server killed with SIGKILL leaves no worker behind.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from deploykit.backends.base import SessionInfo
from deploykit.errors import BackendError, DeployKitError, ModelUnavailableError
from deploykit.tensors import TensorSpec
from deploykit.workers import die_with_parent


def _as_data(exc: BaseException) -> dict[str, Any]:
    if isinstance(exc, DeployKitError):
        return exc.to_dict()
    return BackendError(f"worker | {type(exc).__name__}: {exc}").to_dict()


def _worker_main(connection: Any, model: dict[str, Any], parent: int) -> None:
    die_with_parent(parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the server stops its workers itself, in order
    from deploykit.sessions import load

    try:
        session = load(model.get("bundle") or model["path"], model["backend"], model["device"], **model["options"])
    except BaseException as exc:
        connection.send(("error", _as_data(exc)))
        return
    connection.send(
        (
            "ready",
            [s.to_dict() for s in session.inputs.values()],
            [s.to_dict() for s in session.outputs.values()],
            session.info.to_dict(),
            session.metadata,
        )
    )
    while True:
        try:
            feeds = connection.recv()
        except (EOFError, OSError):
            break
        if feeds is None:
            break
        try:
            connection.send(("ok", session.run(feeds)))
        except BaseException as exc:
            connection.send(("error", _as_data(exc)))
    session.close()


class IsolatedSession:
    """A session whose backend runs in a worker process; ``run`` one call at a time.

    It offers what the serving runner uses of ``Session``: ``inputs``, ``outputs``, ``info``,
    ``metadata``, ``model_path``, ``run`` and ``close``.
    """

    def __init__(self, model: Mapping[str, Any], load_timeout_s: float) -> None:
        context = multiprocessing.get_context("spawn")
        self._connection, child = context.Pipe()
        self._name = str(model["name"])
        self.model_path = Path(model["path"])
        self._process = context.Process(
            target=_worker_main,
            args=(child, dict(model), os.getpid()),
            name=f"deploykit-serve-{self._name}",
            daemon=True,
        )
        self._process.start()
        child.close()
        self._lock = threading.Lock()
        if not self._connection.poll(load_timeout_s):
            self.kill()
            raise ModelUnavailableError(
                f"model '{self._name}' | its worker did not finish loading within {load_timeout_s:g} s; killed.",
                hint="check the backend, or raise the load timeout.",
            )
        message = self._receive("while loading")
        if message[0] == "error":
            self._process.join(timeout=5)
            raise BackendError.from_dict(message[1])
        _, inputs, outputs, info, metadata = message
        self.inputs = {s["name"]: TensorSpec.from_dict(s) for s in inputs}
        self.outputs = {s["name"]: TensorSpec.from_dict(s) for s in outputs}
        self.info = SessionInfo.from_dict(info)
        self.metadata: dict[str, str] = dict(metadata)

    def _receive(self, when: str) -> Any:
        try:
            return self._connection.recv()
        except (EOFError, OSError):
            self._process.join(timeout=5)
            code = self._process.exitcode
            how = f"signal {signal.Signals(-code).name}" if code is not None and code < 0 else f"exit code {code}"
            raise ModelUnavailableError(
                f"model '{self._name}' | its backend's worker process ended {when} ({how}); the model is not ready.",
                hint="the backend crashed on this model; try another backend or device.",
            ) from None

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        with self._lock:
            try:
                self._connection.send(dict(feeds))
            except (BrokenPipeError, OSError):
                self._receive("before the request")
            message = self._receive("while running a request")
        if message[0] == "error":
            raise BackendError.from_dict(message[1])
        outputs: dict[str, np.ndarray] = message[1]
        return outputs

    def kill(self) -> None:
        if self._process.is_alive():
            self._process.kill()
        self._process.join(timeout=5)

    def close(self) -> None:
        try:
            self._connection.send(None)
        except (BrokenPipeError, OSError):
            pass
        self._process.join(timeout=5)
        self.kill()
        self._connection.close()
