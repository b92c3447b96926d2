"""The served models by name: lookups, metadata and the answer to one infer, for both front ends.

HTTP and gRPC differ only in how tensors travel; what a model is called, what its metadata,
configuration and statistics say, which errors a request can get, what the metrics count and which
models the repository extension may load or unload is decided here, once.

A model loaded later comes from the served folders (``folders``), by name. It runs where the
command's ``.onnx`` models run (backend, device, options, instances, isolation), a bundle in its own
configuration, after the checks a model gets at start-up.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import numpy as np

from deploykit._version import __version__
from deploykit.errors import (
    BackendError,
    DeployKitError,
    InputError,
    ModelLoadError,
    ModelNotFoundError,
    ModelNotServedError,
    ModelUnavailableError,
    RequestError,
    ServeError,
    UnsupportedRequestError,
    UsageError,
)
from deploykit.model import check_model_path
from deploykit.serve.config import BatchPolicy, ServedModel, is_model_name
from deploykit.serve.folders import check_inside, folder_list, loadable_models, served_folders
from deploykit.serve.metrics import ServerMetrics
from deploykit.serve.model_config import model_config
from deploykit.serve.protocol import tensor_metadata
from deploykit.serve.runner import ModelRunner, open_in_process
from deploykit.serve.shared_memory import SharedMemoryRegions

SERVER_NAME = "deploykit"
EXTENSIONS = (
    "binary_tensor_data",
    "system_shared_memory",
    "model_configuration",
    "statistics",
    "model_repository",
    "model_repository(unload_dependents)",
    "deploykit_pipelines",
)
# Triton's state names in the repository index
_INDEX_STATES = {
    "loading": "LOADING",
    "ready": "READY",
    "unavailable": "UNAVAILABLE",
    "stopping": "UNAVAILABLE",
    "closed": "UNAVAILABLE",
}
_UNLOADED = "it was unloaded (POST /v2/repository/models/NAME/load loads it again)"
# load parameters Triton defines that deploykit does not take: a configuration override and model files
_LOAD_OVERRIDES = ("config", "file:")


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
        unload_timeout_s: float = 10.0,
    ) -> None:
        check_names(models)
        self.metrics = metrics
        self.policy = policy
        self.load_timeout_s = load_timeout_s
        self.unload_timeout_s = unload_timeout_s
        self.models = list(models)
        #: replaced whole, never changed in place: readers iterate it from other threads
        self.runners: dict[str, ModelRunner] = {model.name: self._runner_for(model) for model in models}
        self.folders = served_folders(models)
        #: names unloaded through the repository extension (their runners stay: a request gets UNAVAILABLE)
        self.unloaded: set[str] = set()
        #: why the last load of a name failed (the repository index says it)
        self.load_failures: dict[str, str] = {}
        #: why the repository extension's load/unload is refused here; None where it is offered
        self.control_refusal: str | None = None
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()
        self.started = time.monotonic()
        self.stopping = False
        #: what the engine adds to every model's metadata parameters (the Ray engine: its replica)
        self.engine_parameters: dict[str, Any] = {"engine": "local"}
        #: the regions clients registered (the system shared-memory extension); the engine decides
        #: whether it offers them (the local one on loopback only)
        self.shared_memory = shared_memory or SharedMemoryRegions(False, "it was not started with shared memory")

    def _runner_for(self, model: ServedModel) -> ModelRunner:
        opener = _isolated_opener(self.load_timeout_s) if model.isolate else open_in_process
        return ModelRunner(model, self.policy, self.metrics.for_model(model.name, model.version), opener)

    def start(self) -> None:
        for runner in self.runners.values():
            runner.start()

    @property
    def ready(self) -> bool:
        """Ready when every loaded model is (Triton's strict readiness); live as long as the server runs."""
        runners = self.runners
        return not self.stopping and all(r.ready for name, r in runners.items() if name not in self.unloaded)

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
        offered = {"system_shared_memory": self.shared_memory.enabled, "model_repository": self.control_refusal is None}
        extensions = [e for e in EXTENSIONS if offered.get(e.partition("(")[0], True)]
        return {"name": SERVER_NAME, "version": __version__, "extensions": extensions}

    def model_metadata(self, name: str, version: str | None = None) -> dict[str, Any]:
        runner = self.runner(name, version)
        return {
            "name": runner.model.name,
            "versions": [runner.model.version],
            "platform": _platform(runner),
            "inputs": [tensor_metadata(s) for s in runner.inputs.values()],
            "outputs": [tensor_metadata(s) for s in runner.outputs.values()],
            "parameters": {
                **{k: v for k, v in runner.describe().items() if v is not None},
                **runner.metrics.counts(),
                **self.engine_parameters,
            },
        }

    def model_config(self, name: str, version: str | None = None) -> dict[str, Any]:
        """The model's configuration (Triton's model-configuration extension, ``model_config``)."""
        runner = self.runner(name, version)
        return model_config(runner, _platform(runner))

    def statistics(self, name: str | None = None, version: str | None = None) -> dict[str, Any]:
        """Triton's statistics extension: one model (and version), or every loaded model."""
        if name:
            runners = [self.runner(name, version)]
        else:
            runners = [r for n, r in self.runners.items() if n not in self.unloaded]
        return {"model_stats": [r.metrics.statistics() for r in runners]}

    def submit(self, runner: ModelRunner, feeds: dict[str, np.ndarray]) -> Future[dict[str, np.ndarray]]:
        """Queue a checked request (the front end counts a refusal as a failure)."""
        return runner.submit(feeds)

    def count_failure(self, runner: ModelRunner | None, exc: BaseException, arrived: float | None = None) -> None:
        if runner is not None:
            runner.metrics.failure(failure_reason(exc)).inc()
            if arrived is not None:
                runner.metrics.failure_us.inc((time.perf_counter() - arrived) * 1e6)

    def count_success(self, runner: ModelRunner, arrived: float) -> None:
        runner.metrics.success.inc()
        runner.metrics.request_us.inc((time.perf_counter() - arrived) * 1e6)
        runner.metrics.last_inference.set(time.time())

    # the repository extension

    def index(self, ready_only: bool = False) -> list[dict[str, str]]:
        """Every model served, unloaded or loadable from the served folders, with Triton's state and why."""
        runners = self.runners
        entries = []
        for name, runner in runners.items():
            state = _INDEX_STATES[runner.state]
            if name in self.unloaded:
                state, reason = ("UNLOADING", "") if runner.state == "stopping" else ("UNAVAILABLE", "unloaded")
            else:
                reason = runner.problem or ("the server is shutting down" if state != "READY" and self.stopping else "")
            entries.append({"name": name, "version": runner.model.version, "state": state, "reason": reason})
        for name in self.loadable():
            if name not in runners:
                reason = self.load_failures.get(name, "not loaded")
                entries.append({"name": name, "version": "1", "state": "UNAVAILABLE", "reason": reason})
        entries.sort(key=lambda entry: entry["name"])
        return [e for e in entries if e["state"] == "READY"] if ready_only else entries

    def loadable(self) -> dict[str, Path]:
        """The models the served folders hold, by name, other than the files already served."""
        return loadable_models(self.folders, [m.source for m in self.models])

    def load(self, name: str, parameters: Mapping[str, Any] | None = None) -> None:
        """Load a model from the served folders by name and wait until it is ready; a model already
        loaded stays as it is. Loads and unloads of one name run one at a time.

        Raises:
            UnsupportedRequestError: load/unload is off here, or a configuration override or model
                files were sent.
            RequestError: the name is a path, or leads out of the served folders.
            ModelNotServedError: no model by that name in the served folders.
            ModelLoadError: the model fails its checks or does not open.
            ModelUnavailableError: the server began to shut down while it loaded.
        """
        self._check_control(f"load of model '{name:.128}'")
        overrides = sorted(k for k in parameters or {} if k.startswith(_LOAD_OVERRIDES))
        if overrides:
            raise UnsupportedRequestError(
                f"load of model '{name:.128}' | takes no configuration override or model files "
                f"({', '.join(repr(k[:40]) for k in overrides[:3])}); deploykit reads a model's configuration "
                "from its file or bundle and the command's options.",
                hint="put the model (NAME.onnx or a bundle folder NAME/) in a served folder and load it by name.",
            )
        self._check_name(name, "load")
        with self._lock(name):
            current = self.runners.get(name)
            if current is not None and name not in self.unloaded and current.state in ("loading", "ready"):
                self._wait_loaded(current)
                if current.ready:
                    return  # already loaded: a changed file is picked up by unload, then load
            runner = self._runner_for(self._model_to_load(name, current))
            runner.start()
            self._wait_loaded(runner)
            if self.stopping:  # the server began to shut down meanwhile: it would not close this one
                runner.close(0)
                raise ModelUnavailableError(f"model '{name}' | was not loaded: the server is shutting down.")
            if not runner.ready:
                problem = runner.problem or f"it did not finish loading within {self.load_timeout_s:g} s"
                runner.close(0)
                self.load_failures[name] = problem
                raise ModelLoadError(
                    f"model '{name}' | did not load: {problem}",
                    hint="fix the model file; the models already served keep serving.",
                )
            self.load_failures.pop(name, None)
            self.runners = {**self.runners, name: runner}
            self.unloaded.discard(name)
            if current is not None:  # unloaded, or not ready (its backend crashed): its sessions are done
                current.close(0)

    def unload(self, name: str) -> None:
        """Stop serving a model: requests already taken finish (within the unload timeout), new ones
        are answered UNAVAILABLE; the sessions close. A model of the served folders that is not
        loaded is left as it is.

        Raises:
            UnsupportedRequestError: load/unload is off here.
            ModelNotServedError: no model by that name is served or in the served folders.
        """
        self._check_control(f"unload of model '{name:.128}'")
        self._check_name(name, "unload")
        with self._lock(name):
            runner = self.runners.get(name)
            if runner is None or name in self.unloaded:
                return
            self.unloaded.add(name)
            runner.close(self.unload_timeout_s, reason=_UNLOADED.replace("NAME", name))

    def _check_control(self, subject: str) -> None:
        if self.control_refusal is not None:
            raise UnsupportedRequestError(
                f"{subject} | is not offered here: {self.control_refusal}.",
                hint="serve with --engine local to load and unload models.",
            )

    def _check_name(self, name: str, action: str) -> None:
        """A name the server serves or its folders hold; a path is refused, an unknown name is NOT_FOUND."""
        if not is_model_name(name):
            raise RequestError(
                f"{action} of model '{name:.128}' | is not a model name; models are loaded by name from the served "
                f"folders ({folder_list(self.folders)}), and a path (outside them or not) is refused.",
                hint="pass the name of NAME.onnx or of a bundle folder NAME/ in a served folder.",
            )
        if name in self.runners:
            return
        loadable = self.loadable()
        if name not in loadable:
            names = ", ".join(repr(n) for n in sorted({*self.runners, *loadable})[:20])
            raise ModelNotServedError(
                f"model '{name}' | is neither served nor in the served folders ({folder_list(self.folders)}); "
                f"known models are {names}.",
                hint="POST /v2/repository/index lists them.",
            )
        check_inside(name, loadable[name], self.folders)

    def _model_to_load(self, name: str, current: ModelRunner | None) -> ServedModel:
        """What a load serves: the same model again after an unload (its file read again: it may have changed
        or gone), else the file or bundle found."""
        try:
            model = current.model if current is not None else self._model_in_folder(name)
            model.interface()  # an unreadable model is refused here, with the reason
        except DeployKitError as exc:
            self.load_failures[name] = str(exc)
            hint = exc.hint or "fix the model file; the models already served keep serving."
            if isinstance(exc, ModelNotFoundError):  # the file went (or became unreadable) after it was served
                hint = f"put {name}'s file back in a served folder, readable by the server, and load it again."
            raise ModelLoadError(f"model '{name}' | fails its checks: {exc.message}", hint=hint) from exc
        return model

    def _model_in_folder(self, name: str) -> ServedModel:
        path = self.loadable()[name]
        first = self.models[0]
        template = next((m for m in self.models if m.bundle is None), None)
        if path.is_dir():
            from deploykit.optimize.bundle import read_bundle

            read_bundle(path, verify=True)  # the model file's SHA-256 before anything reads it
        if path.is_dir() or template is None:
            return ServedModel.from_path(path, name=name, instances=first.instances, isolate=first.isolate)
        return dataclasses.replace(template, name=name, path=check_model_path(path), precision=None, verdict=None)

    def _wait_loaded(self, runner: ModelRunner) -> None:
        deadline = time.monotonic() + self.load_timeout_s + 5.0
        while runner.state == "loading" and time.monotonic() < deadline:
            time.sleep(0.02)

    def _lock(self, name: str) -> threading.Lock:
        with self._locks_guard:
            return self._locks.setdefault(name, threading.Lock())

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


def _platform(runner: ModelRunner) -> str:
    """What a model's metadata and configuration call its platform: deploykit's backend that runs it."""
    backend = runner.info.backend if runner.info is not None else runner.model.backend
    return f"deploykit-{backend}"


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
