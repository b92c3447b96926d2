"""Test plug-in backends for the server: one that aborts its process in the middle of a request."""

from __future__ import annotations

import os
from collections.abc import Mapping

import numpy as np

from deploykit.backends.base import Backend, OpenRequest, Session
from deploykit.backends.registry import get_backend
from deploykit.backends.traits import RuntimePackage
from deploykit.model import Model

ABORT_VALUE = 666.0


class _AbortingSession(Session):
    backend = "aborter"

    def __init__(self, inner: Session) -> None:
        super().__init__(inner.model_path, list(inner.inputs.values()), list(inner.outputs.values()), inner.info,
                         inner.metadata)  # fmt: skip
        self.info.backend = self.backend
        self._inner = inner

    def _run(self, feeds: dict[str, np.ndarray]) -> Mapping[str, np.ndarray]:
        if any(np.any(array == ABORT_VALUE) for array in feeds.values()):
            os.abort()  # a runtime that crashes on one input, mid-request
        return self._inner.run(feeds)

    def _close(self) -> None:
        self._inner.close()


class AbortOnRunBackend(Backend):
    """ONNX Runtime, except that a request holding the value 666 aborts the process."""

    name = "aborter"
    runtime = RuntimePackage(module="onnxruntime", pip_extra="onnxruntime")

    def version(self) -> str:
        return "aborter 0"

    def devices(self) -> list[str]:
        return ["cpu"]

    def _open(self, model: Model, request: OpenRequest) -> Session:
        return _AbortingSession(get_backend("onnxruntime").open(model, request.device))


class _SlowSession(_AbortingSession):
    backend = "slow"

    def _run(self, feeds: dict[str, np.ndarray]) -> Mapping[str, np.ndarray]:
        import time

        time.sleep(SLOW_RUN_S)
        return self._inner.run(feeds)


SLOW_RUN_S = 0.6


class SlowBackend(AbortOnRunBackend):
    """ONNX Runtime, SLOW_RUN_S seconds per run: a queue that fills on demand."""

    name = "slow"

    def _open(self, model: Model, request: OpenRequest) -> Session:
        return _SlowSession(get_backend("onnxruntime").open(model, request.device))
