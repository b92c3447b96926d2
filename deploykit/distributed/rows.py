"""One file in, one result row out: the unit of work both engines (local and Ray) share.

A row is a JSON-serialisable dict::

    {"path": ..., "status": "ok" | "error", "error": None | reason, "task": a task with an app pipeline | "tensor",
     "results": the task's JSON (detections, top-k classes ...), or {output: {"shape", "dtype", "data"}} for "tensor",
     "timing_ms": {"pre_ms", "infer_ms", "post_ms", "total_ms"},
     "backend": ..., "device": ..., "worker": {"node", "pid", "threads", "precision", "options", "restarted"}}

A task with an app pipeline (``detect``, ``classify`` ...) reads image files through its pipeline, and its
``Task`` plug-in says which keywords each call takes and how the results read as JSON; ``tensor`` feeds
``.npy`` (one-input models) or ``.npz`` files (one array per input name) to a plain session. A bad
input (not an image, empty, truncated, odd channels, wrong shape) becomes an error row with the
reason; it never stops the job. Both engines build rows here, so they produce the same rows.
"""

from __future__ import annotations

import io
import os
import platform
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from deploykit.backends.registry import DEFAULT_BACKEND
from deploykit.errors import DeployKitError, InputError, UsageError
from deploykit.tasks.registry import pipeline_tasks, task_class
from deploykit.tensors import TensorSpec
from deploykit.vision.image import decode_image
from deploykit.vision.results import Timing

TASKS = (*pipeline_tasks(), "tensor")  # the registry's tasks an app pipeline runs, or raw tensors
ARRAY_SUFFIXES = (".npy", ".npz")


def decode_arrays(data: bytes, name: str, inputs: dict[str, TensorSpec]) -> dict[str, np.ndarray]:
    """Feeds from a ``.npy`` (the one input of the model) or ``.npz`` (arrays named like the inputs);
    an array one axis short of its input gets the batch axis.

    Raises:
        InputError: the bytes are not a numpy file, or a ``.npy`` is given to a multi-input model.
    """
    try:
        loaded = np.load(io.BytesIO(data), allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise InputError(
            f"array file '{name}' | is not a .npy or .npz numpy file ({exc}).",
            hint="save inputs with np.save or np.savez.",
        ) from exc
    if isinstance(loaded, np.ndarray):
        if len(inputs) != 1:
            raise InputError(
                f"array file '{name}' | holds one array; the model has {len(inputs)} inputs ({', '.join(inputs)}).",
                hint="save an .npz with one array per input name: np.savez(path, a=..., b=...).",
            )
        arrays = {next(iter(inputs)): loaded}
    else:
        arrays = {key: loaded[key] for key in loaded.files}
    feeds = {}
    for key, array in arrays.items():
        spec = inputs.get(key)
        rank = None if spec is None or spec.shape is None else len(spec.shape)
        feeds[key] = array[None] if rank is not None and array.ndim == rank - 1 else array
    return feeds


class Predictor:
    """A task's app pipeline (Detector, Classifier ...), or a plain session for ``tensor``, that turns (path, bytes)
    into result rows.

    Args:
        model: the ``.onnx`` file (already on this machine).
        task: ``detect``, ``classify`` or ``tensor``.
        backend, device: where it runs.
        threads: the backend's thread count (the CPUs this worker may use).
        pipeline_options: keyword arguments of the pipeline (labels, conf, iou, mean, std ...).
        top_k: classification: how many classes per row.
        backend_options: further backend options.
        restarted: whether this worker replaces one that crashed (recorded in every row).
    """

    def __init__(
        self,
        model: str | os.PathLike[str],
        task: str,
        backend: str = DEFAULT_BACKEND,
        device: str | None = None,
        *,
        threads: int | None = None,
        pipeline_options: dict[str, Any] | None = None,
        top_k: int = 5,
        backend_options: dict[str, Any] | None = None,
        restarted: bool = False,
    ) -> None:
        if task not in TASKS:
            raise UsageError(
                f"task '{task}' | is not {', '.join(TASKS[:-1])} or {TASKS[-1]}.", hint="e.g. task='detect'."
            )
        options = dict(backend_options or {})
        if threads:
            options["threads"] = threads
        self.pipeline: Any = None
        self.call_options: dict[str, Any] = {}
        if task == "tensor":
            from deploykit.sessions import load

            self.session = load(model, backend, device, **options)
        else:
            self.plugin = task_class(task)
            self.pipeline = self.plugin.pipeline_class()(model, backend, device, **options, **(pipeline_options or {}))
            self.session = self.pipeline.session
            self.call_options = self.plugin.call_options({"top_k": top_k})
        self.task, self.top_k = task, top_k
        info = self.session.info
        self.backend, self.device = info.backend, info.device
        threads = info.options.get("threads")
        self.worker = {
            "node": platform.node(),
            "pid": os.getpid(),
            "threads": threads,
            "precision": info.precision,
            "options": dict(info.options),
            "restarted": restarted,
        }

    def _base(self, path: str) -> dict[str, Any]:
        return {"path": path, "task": self.task, "backend": self.backend, "device": self.device, "worker": self.worker}

    def _tensor(self, path: str, data: bytes) -> tuple[dict[str, Any], Timing]:
        start = time.perf_counter()
        feeds = decode_arrays(data, path, self.session.inputs)
        loaded = time.perf_counter()
        outputs = self.session.run(feeds)
        ran = time.perf_counter()
        results = {
            name: {"shape": list(array.shape), "dtype": str(array.dtype), "data": array.tolist()}
            for name, array in outputs.items()
        }
        return results, Timing((loaded - start) * 1e3, (ran - loaded) * 1e3, (time.perf_counter() - ran) * 1e3)

    def row(self, path: str, data: bytes) -> dict[str, Any]:
        """The result row of one file's bytes (an encoded image, or a .npy/.npz for ``tensor``)."""
        results: list[Any] | dict[str, Any]
        timing: Timing | None
        try:
            if self.pipeline is None:
                results, timing = self._tensor(path, data)
            else:
                results = self.plugin.to_json(self.pipeline(decode_image(data, path), **self.call_options))
                timing = self.pipeline.last_timing
        except DeployKitError as exc:
            return self.error_row(path, str(exc))
        return {
            **self._base(path),
            "status": "ok",
            "error": None,
            "results": results,
            "timing_ms": timing.to_dict() if timing else None,
        }

    def error_row(self, path: str, reason: str) -> dict[str, Any]:
        """The row of an input that could not be used."""
        return {**self._base(path), "status": "error", "error": reason, "results": [], "timing_ms": None}

    def rows(self, paths: Sequence[str], blobs: Sequence[bytes]) -> list[dict[str, Any]]:
        return [self.row(path, data) for path, data in zip(paths, blobs, strict=True)]

    def close(self) -> None:
        self.session.close()
