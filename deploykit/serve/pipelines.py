"""Image in, detections or top-k out: ``POST /v2/models/{name}/image`` for detect and classify models.

The body is an encoded image (JPEG, PNG ...); the answer is JSON, so a thin client needs no numpy.
Pre- and post-processing are deploykit.vision's ``Detector`` and ``Classifier``, run around a
``QueuedSession`` whose forward pass goes through the model's queue, so image requests are batched
and counted with tensor requests.
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
                from deploykit.vision.pipelines import Classifier, Detector

                task = model_task(runner)
                if task is None:
                    raise RequestError(
                        f"model '{runner.model.name}' | has no detect or classify task in its metadata, so it takes "
                        "tensors only.",
                        hint="POST tensors to /v2/models/NAME/infer instead.",
                    )
                session = QueuedSession(runner)
                try:
                    pipeline = Detector(session) if task == "detect" else Classifier(session)
                except UsageError as exc:
                    raise RequestError(f"model '{runner.model.name}' | cannot run as a {task} pipeline: {exc}") from exc
                self._made[runner.model.name] = (runner, pipeline)
            return pipeline


def _number(request: Request, name: str, default: float, *, integer: bool = False) -> Any:
    text = request.query_params.get(name)
    if text is None:
        return default
    try:
        return int(text) if integer else float(text)
    except ValueError:
        raise RequestError(
            f"parameter '{name}' | '{text:.40}' is not {'an integer' if integer else 'a number'}.",
            hint=f"e.g. ?{name}={default}.",
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
        task = model_task(runner)
        try:
            if task == "detect":
                conf = _number(request, "conf", pipeline.conf)
                iou = _number(request, "iou", pipeline.iou)
                found = pipeline(image, conf=conf, iou=iou)
                return {"model_name": runner.model.name, "task": task, "detections": [d.to_dict() for d in found]}
            top_k = _number(request, "top_k", 5, integer=True)
            classes = pipeline(image, top_k=top_k)
            return {"model_name": runner.model.name, "task": task, "classes": [c.to_dict() for c in classes]}
        except UsageError as exc:  # a threshold out of range: the caller's parameter
            raise RequestError(str(exc)) from exc

    async def image(request: Request) -> Response:
        params = request.path_params
        runner = repository.runner(params["name"], params.get("version"))
        body = await read_body(request, max_request_bytes)
        if not body:
            raise RequestError("request | has an empty body, expected an encoded image.", hint="POST a JPEG or PNG.")
        result = await run_in_threadpool(answer, runner, body, request)
        return Response(json.dumps(result), media_type="application/json")

    return image
