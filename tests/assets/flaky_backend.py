"""A backend whose answers change from call to call: ONNX Runtime, with noise added on every other run."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from deploykit.backends.base import Backend, OpenRequest, Session
from deploykit.backends.registry import get_backend
from deploykit.backends.traits import RuntimePackage
from deploykit.model import Model


class _FlakySession(Session):
    def __init__(self, inner: Session) -> None:
        super().__init__(inner.model_path, list(inner.inputs.values()), list(inner.outputs.values()), inner.info,
                         inner.metadata)  # fmt: skip
        self.info.backend = "flaky"
        self._inner = inner
        self._calls = 0
        self._rng = np.random.default_rng(0)

    def _run(self, feeds: dict[str, np.ndarray]) -> Mapping[str, np.ndarray]:
        self._calls += 1
        produced = dict(self._inner.run(feeds))
        if self._calls % 2 == 0:  # a race that loses every other time: 1 % of the output's scale
            for name, array in produced.items():
                if array.dtype.kind == "f":
                    scale = float(np.abs(array).max()) or 1.0
                    noise = self._rng.normal(0.0, 0.01 * scale, array.shape)
                    produced[name] = (array + noise).astype(array.dtype)
        return produced

    def _close(self) -> None:
        self._inner.close()


class FlakyBackend(Backend):
    """ONNX Runtime, except that every second run of a session adds noise to its outputs."""

    name = "flaky"
    runtime = RuntimePackage(module="onnxruntime", pip_extra="onnxruntime")

    def version(self) -> str:
        return "flaky 0"

    def devices(self) -> list[str]:
        return ["cpu"]

    def _open(self, model: Model, request: OpenRequest) -> Session:
        return _FlakySession(get_backend("onnxruntime").open(model, request.device))
