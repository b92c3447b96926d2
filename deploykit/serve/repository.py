"""The served models by name: lookups, metadata and the answer to one infer, for both front ends.

HTTP and gRPC differ only in how tensors travel; what a model is called, what its metadata says,
which errors a request can get and what the metrics count is decided here, once.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any

import numpy as np

from deploykit._version import __version__
from deploykit.errors import (
    BackendError,
    InputError,
    ModelNotServedError,
    ModelUnavailableError,
    RequestError,
    ServeError,
    UsageError,
)
from deploykit.serve.config import BatchPolicy, ServedModel
from deploykit.serve.metrics import ServerMetrics
from deploykit.serve.protocol import tensor_metadata
from deploykit.serve.runner import ModelRunner, open_in_process
from deploykit.serve.shared_memory import SharedMemoryRegions

SERVER_NAME = "deploykit"
EXTENSIONS = ("binary_tensor_data", "system_shared_memory", "deploykit_pipelines")


class Repository:
    """Every served model's runner, by name."""

    def __init__(
        self,
        models: Sequence[ServedModel],
        policy: BatchPolicy,
        metrics: ServerMetrics,
        *,
        load_timeout_s: float,
        shared_memory: SharedMemoryRegions | None = None,
    ) -> None:
        check_names(models)
        self.metrics = metrics
        self.runners: dict[str, ModelRunner] = {}
        for model in models:
            opener = _isolated_opener(load_timeout_s) if model.isolate else open_in_process
            self.runners[model.name] = ModelRunner(model, policy, metrics.for_model(model.name, model.version), opener)
        self.started = time.monotonic()
        self.stopping = False
        #: what the engine adds to every model's metadata parameters (the Ray engine: its replica)
        self.engine_parameters: dict[str, Any] = {"engine": "local"}
        #: the regions clients registered (the system shared-memory extension); the engine decides
        #: whether it offers them (the local one on loopback only)
        self.shared_memory = shared_memory or SharedMemoryRegions(False, "it was not started with shared memory")

    def start(self) -> None:
        for runner in self.runners.values():
            runner.start()

    @property
    def ready(self) -> bool:
        """Ready when every model is (Triton's strict readiness); live as long as the server runs."""
        return not self.stopping and all(r.ready for r in self.runners.values())

    def runner(self, name: str, version: str | None = None) -> ModelRunner:
        """The runner for a name (and version), or ``ModelNotServedError``."""
        runner = self.runners.get(name)
        if runner is None:
            served = ", ".join(repr(n) for n in self.runners)
            raise ModelNotServedError(
                f"model '{name:.128}' | is not served here; served models are {served}.",
                hint="GET /v2/models/NAME for one of them.",
            )
        if version not in (None, "", runner.model.version):
            raise ModelNotServedError(
                f"model '{name}' | has no version '{version:.40}'; served version is '{runner.model.version}'.",
                hint=f"ask for version {runner.model.version}, or leave the version out.",
            )
        return runner

    def server_metadata(self) -> dict[str, Any]:
        extensions = [e for e in EXTENSIONS if e != "system_shared_memory" or self.shared_memory.enabled]
        return {"name": SERVER_NAME, "version": __version__, "extensions": extensions}

    def model_metadata(self, name: str, version: str | None = None) -> dict[str, Any]:
        runner = self.runner(name, version)
        backend = runner.info.backend if runner.info is not None else runner.model.backend
        return {
            "name": runner.model.name,
            "versions": [runner.model.version],
            "platform": f"deploykit-{backend}",
            "inputs": [tensor_metadata(s) for s in runner.inputs.values()],
            "outputs": [tensor_metadata(s) for s in runner.outputs.values()],
            "parameters": {
                **{k: v for k, v in runner.describe().items() if v is not None},
                **runner.metrics.counts(),
                **self.engine_parameters,
            },
        }

    def submit(self, runner: ModelRunner, feeds: dict[str, np.ndarray]) -> Future[dict[str, np.ndarray]]:
        """Queue a checked request (the front end counts a refusal as a failure)."""
        return runner.submit(feeds)

    def count_failure(self, runner: ModelRunner | None, exc: BaseException) -> None:
        if runner is not None:
            runner.metrics.failure(failure_reason(exc)).inc()

    def count_success(self, runner: ModelRunner, arrived: float) -> None:
        runner.metrics.success.inc()
        runner.metrics.request_us.inc((time.perf_counter() - arrived) * 1e6)

    def close(self, timeout_s: float) -> None:
        self.stopping = True
        deadline = time.monotonic() + timeout_s
        for runner in self.runners.values():
            runner.close(max(0.0, deadline - time.monotonic()))


def check_names(models: Sequence[ServedModel]) -> None:
    """At least one model, and no name twice.

    Raises:
        UsageError: naming the problem.
    """
    names = [m.name for m in models]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise UsageError(
            f"model name '{duplicates[0]}' | is served twice.", hint="name each model: NAME=path/to/model.onnx."
        )
    if not models:
        raise UsageError("serve | no model to serve.", hint="pass one or more .onnx files or bundle folders.")


def failure_reason(exc: BaseException) -> str:
    """The ``reason`` label of a failed request."""
    if isinstance(exc, (RequestError, InputError)):
        return "invalid"
    if isinstance(exc, ModelUnavailableError):
        return "unavailable"
    if isinstance(exc, BackendError):
        return "backend"
    if isinstance(exc, ServeError):
        return "invalid"
    return "internal"


def _isolated_opener(load_timeout_s: float) -> Any:
    from deploykit.serve.worker import IsolatedSession

    def open_isolated(model: ServedModel) -> Any:
        return IsolatedSession(model.to_dict(), load_timeout_s)

    return open_isolated
