"""A backend's run in its own worker process, so a crash or a hang costs one row, never the command.

Every backend run that is part of a verification goes through ``run_candidate``: it writes the input
sets as ``.npz`` job files, starts ``deploykit.verify.worker`` through ``deploykit.workers`` (which
owns starting, time limits, signals and the job/result protocol) and reads the outputs back.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from deploykit.errors import BackendError
from deploykit.model import Model, path_of
from deploykit.workers import DEFAULT_TIMEOUT_S, HOST, Interpreter, read_arrays, rebuild_error, run_worker, write_arrays


@dataclass
class CandidateRun:
    """One backend's outputs on every input set, with what actually ran, or the reason it did not."""

    label: str
    info: dict[str, Any] | None = None
    outputs: list[dict[str, np.ndarray]] = field(default_factory=list)
    error: str | None = None
    """Why it did not run: the error's message (its hint is ``hint``), the crash's signal or the timeout."""
    error_data: dict[str, Any] | None = None
    """The worker's ``DeployKitError`` as data (``DeployKitError.to_dict``); None for a crash or a timeout."""
    seconds: dict[str, Any] = field(default_factory=dict)
    """The worker's one pass: ``load`` and ``run`` (one per input set) seconds; no statistics."""
    platform: str = "host"
    hint: str | None = None
    """How to fix what stopped it: the hint of the worker's error, apart from ``error``."""
    repeated: list[list[dict[str, np.ndarray]]] = field(default_factory=list)
    """The outputs of every later pass over the same input sets in the same session (``repeat_runs``)."""

    @classmethod
    def ran(
        cls, label: str, result: Mapping[str, Any], outputs: list[dict[str, np.ndarray]], platform: str = "host"
    ) -> CandidateRun:
        """The run a worker's ok result and its outputs describe: the first pass, the later ones apart."""
        passes = max(1, int(result.get("repeat_runs") or 1))
        count = len(outputs) // passes
        repeated = [outputs[count * i : count * (i + 1)] for i in range(1, passes)]
        return cls(
            label,
            result.get("info"),
            outputs[:count],
            seconds=result.get("seconds") or {},
            platform=platform,
            repeated=repeated,
        )

    @classmethod
    def failed(cls, label: str, result: Mapping[str, Any], platform: str = "host") -> CandidateRun:
        """The run a worker's error result describes: the error's message and hint apart, from its data."""
        data = result.get("error_data")
        if data is None:
            return cls(label, result.get("info"), error=result.get("error") or "did not run", platform=platform)
        error = rebuild_error(data)
        return cls(label, result.get("info"), error=error.message, error_data=data, platform=platform, hint=error.hint)

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
        if self.error is None:
            return
        if self.error_data is not None:
            raise rebuild_error(self.error_data)
        raise BackendError(
            f"backend '{self.label}' | crashed running '{Path(model).name}': {self.error}.",
            hint="the runtime itself failed (this is not an error in the model or the inputs); "
            "try another backend or device, and report it to the runtime's authors.",
        )


def run_candidate(
    model: Model | str | os.PathLike[str],
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
    path = path_of(model)
    job: dict[str, Any] = {"model": str(path), "backend": backend, "device": device, "options": dict(options or {})}
    job.update(extra or {})
    if not isolate and interpreter == HOST:
        from deploykit.verify.worker import run_job

        result, outputs = run_job(job, list(cases), model=model if isinstance(model, Model) else None)
        if result.get("status") != "ok":
            return CandidateRun.failed(label, result)
        return CandidateRun.ran(label, result, outputs)
    with tempfile.TemporaryDirectory(prefix="deploykit-verify-") as scratch:
        directory = Path(scratch)
        job["cases"] = []
        for index, feeds in enumerate(cases):
            path = directory / f"inputs-{index}.npz"
            write_arrays(path, feeds)
            job["cases"].append(str(path))
        job["outputs_dir"] = str(directory)
        outcome = run_worker("deploykit.verify.worker", job, timeout_s=timeout_s, interpreter=interpreter)
        where = interpreter.platform
        if outcome.result is None:
            return CandidateRun(label, error=outcome.error, platform=where)
        if outcome.result.get("status") != "ok":
            return CandidateRun.failed(label, outcome.result, where)
        paths = sorted(directory.glob("outputs-*.npz"), key=lambda p: int(p.stem.split("-")[1]))
        outputs = [read_arrays(path) for path in paths]
        return CandidateRun.ran(label, outcome.result, outputs, where)
