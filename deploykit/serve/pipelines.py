"""Image in, results out: ``POST /v2/models/{name}/image`` for models whose task has an app pipeline.

The body is an encoded image (JPEG, PNG ...); the answer is JSON, so a thin client needs no numpy.
The model's task (``deploykit.task`` in its metadata) says which pipeline (``Detector``,
``Classifier`` ...) runs around a ``QueuedSession``, whose forward pass goes through the model's
queue, so image requests are batched and counted with tensor requests; which query parameters each
call takes (``conf``, ``iou``; ``top_k``); and how the results read as JSON.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import numpy as np
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from deploykit.backends.base import Session, SessionInfo
from deploykit.errors import DeployKitError, RequestError, UsageError
from deploykit.metadata import read_metadata
from deploykit.serve.runner import ModelRunner
from deploykit.tasks.base import Task
from deploykit.tasks.registry import pipeline_tasks, task_class


class QueuedSession(Session):
    """A ``Session`` whose runs are requests to a served model's queue."""

    def __init__(self, runner: ModelRunner) -> None:
        info = runner.info
        if not isinstance(info, SessionInfo):
            device = runner.model.device or "cpu"
            info = SessionInfo(runner.model.backend, "?", device, device, runner.precision or "f32")
        inputs, outputs = list(runner.inputs.values()), list(runner.outputs.values())
        super().__init__(runner.model.path, inputs, outputs, info, runner.metadata)
        self._runner = runner

    def _run(self, feeds: dict[str, np.ndarray]) -> Mapping[str, np.ndarray]:
        return self._runner.submit(feeds).result()


def model_task(runner: ModelRunner) -> str | None:
    return read_metadata(runner.metadata, runner.model.name).task


def _pipeline_task(runner: ModelRunner) -> type[Task]:
    """The task plug-in of a model that takes images: the one its metadata names, if an app pipeline runs it."""
    task = model_task(runner)
    runnable = pipeline_tasks()
    if task not in runnable:
        names = " or ".join(runnable)
        problem = (
            f"has no {names} task in its metadata"
            if task is None
            else f"has task '{task}' in its metadata, which has no app pipeline (one runs {names})"
        )
        raise RequestError(
            f"model '{runner.model.name}' | {problem}, so it takes tensors only.",
            hint="POST tensors to /v2/models/NAME/infer instead.",
        )
    return task_class(task)


class _Pipelines:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        # by name, with the runner it was made for: a model unloaded and loaded again has a new runner
        self._made: dict[str, tuple[ModelRunner, Any]] = {}

    def get(self, runner: ModelRunner) -> Any:
        with self._lock:
            made = self._made.get(runner.model.name)
            pipeline = made[1] if made is not None and made[0] is runner else None
            if pipeline is None:
                task = _pipeline_task(runner)
                try:
                    pipeline = task.open_pipeline(QueuedSession(runner), None, None, {})
                except UsageError as exc:
                    raise RequestError(
                        f"model '{runner.model.name}' | cannot run as a {task.name} pipeline: {exc}"
                    ) from exc
                self._made[runner.model.name] = (runner, pipeline)
            return pipeline


def _number(request: Request, name: str, kind: type) -> Any:
    """A query parameter as a number of its type, or None when the request does not give it."""
    text = request.query_params.get(name)
    if text is None:
        return None
    try:
        return int(text) if kind is int else float(text)
    except ValueError:
        raise RequestError(
            f"parameter '{name}' | '{text:.40}' is not {'an integer' if kind is int else 'a number'}.",
            hint=f"e.g. ?{name}={5 if kind is int else 0.5}.",
        ) from None


def image_route(
    repository: Any, max_request_bytes: int, read_body: Callable[[Request, int], Awaitable[bytes]]
) -> Callable[[Request], Awaitable[Response]]:
    """The ``/image`` handler for the HTTP app."""
    import json

    from deploykit.vision.image import decode_image

    pipelines = _Pipelines()

    def answer(runner: ModelRunner, data: bytes, request: Request) -> dict[str, Any]:
        pipeline = pipelines.get(runner)
        try:
            image = decode_image(data, "request body")
        except DeployKitError as exc:
            raise RequestError(str(exc)) from exc
        task = _pipeline_task(runner)
        options = {name: _number(request, name, kind) for name, kind in task.call_parameters}
        try:
            results = pipeline(image, **{name: value for name, value in options.items() if value is not None})
        except UsageError as exc:  # a threshold out of range: the caller's parameter
            raise RequestError(str(exc)) from exc
        return {"model_name": runner.model.name, "task": task.name, task.json_key: task.to_json(results)}

    async def image(request: Request) -> Response:
        params = request.path_params
        runner = repository.runner(params["name"], params.get("version"))
        body = await read_body(request, max_request_bytes)
        if not body:
            raise RequestError("request | has an empty body, expected an encoded image.", hint="POST a JPEG or PNG.")
        result = await run_in_threadpool(answer, runner, body, request)
        return Response(json.dumps(result), media_type="application/json")

    return image
