"""The KServe v2 REST front end: a Starlette (ASGI) app over a ``Repository``.

Routes: ``/v2/health/live``, ``/v2/health/ready``, ``/v2``, ``/v2/models/{name}[/versions/{v}]``
with ``/ready``, ``/infer`` (JSON tensors, the binary tensor data extension and tensors in
system shared memory), ``/config`` and ``/stats`` (Triton's model-configuration and statistics
extensions; ``/v2/models/stats`` for every model), ``/v2/repository/index`` and
``/v2/repository/models/{name}/load|unload`` (the repository extension),
``/v2/systemsharedmemory/...`` (register, unregister, status), and the pipeline route
``/v2/models/{name}[/versions/{v}]/image`` (see ``pipelines``). Every failure is a
``{"error": "..."}`` body with the protocol's status; no traceback ever leaves the server.

With ``raw_infer`` the infer route is answered as plain ASGI before Starlette's routing, middleware,
``Request`` and ``Response``, with the same checks, counters and error bodies; ``http_bodies`` reads its
body and sends its reply. An ASGI server that must pickle its messages (Ray Serve's proxy) gets the
Starlette route.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import re
import time
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from deploykit.errors import DeployKitError, RequestError
from deploykit.serve.http_bodies import first_headers, read_body, receive_body, send_reply
from deploykit.serve.protocol import (
    HEADER_LENGTH,
    decode_http,
    encode_http_parts,
    error_text,
    http_status,
    parse_json,
)
from deploykit.serve.repository import Repository
from deploykit.serve.runner import ModelRunner

log = logging.getLogger("deploykit.serve")
Handler = Callable[[Request], Awaitable[Response]]
Feeds = dict[str, np.ndarray]
#: How a checked request reaches a session: the runner's queue (default) or the Ray engine's ``@serve.batch``.
Submit = Callable[[ModelRunner, Feeds], Awaitable[Feeds]]
#: The infer route as plain ASGI: (scope, receive, send, model name, version or None).
RawInfer = Callable[[Scope, Receive, Send, str, "str | None"], Awaitable[None]]
# Decoding a large JSON body takes milliseconds: off the event loop, so other requests keep flowing.
_JSON_INLINE_BYTES = 64 * 1024
# A repository index, unload or shared-memory registration is a small JSON object, whatever --max-request-size
_CONTROL_BYTES = 64 * 1024
# Starlette's {name} and {version} match [^/]+ in the decoded path, and so does this
INFER_PATH = re.compile(r"/v2/models/([^/]+)(?:/versions/([^/]+))?/infer")
_UNAUTHORIZED = "request | no valid bearer token. Hint: send Authorization: Bearer TOKEN."


def _json(data: Any, status: int = 200) -> Response:
    return Response(json.dumps(data, separators=(",", ":")), status_code=status, media_type="application/json")


def error_response(exc: BaseException) -> Response:
    from starlette.requests import ClientDisconnect

    if isinstance(exc, ClientDisconnect):  # the client went away mid-body: nobody reads an answer
        log.info("a client disconnected before its request body was read")
        return _json({"error": "request | the client disconnected before the body was read."}, 400)
    if not isinstance(exc, DeployKitError):
        log.exception("unexpected error while answering a request", exc_info=exc)
    return _json({"error": error_text(exc)}, http_status(exc))


class V2App(Starlette):
    """Starlette, with ``POST /v2/models/{name}[/versions/{v}]/infer`` handed to ``raw_infer`` (when
    given) before Starlette's routing and middleware; every other request goes through Starlette."""

    def __init__(self, *, raw_infer: RawInfer | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.raw_infer = raw_infer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.raw_infer is not None and scope["type"] == "http" and scope["method"] == "POST":
            match = INFER_PATH.fullmatch(scope["path"]) if not scope.get("root_path") else None
            if match is not None:
                await self.raw_infer(scope, receive, send, match[1], match[2])
                return
        await super().__call__(scope, receive, send)


class _V2Handlers:
    """The v2 routes' handlers over one ``repository``: the bearer token check, the body limit and how a
    checked request reaches a session (``submit``, by default the model's runner and its batcher)."""

    def __init__(
        self, repository: Repository, token: str | None, max_request_bytes: int, submit: Submit | None
    ) -> None:
        self.repository = repository
        self.max_request_bytes = max_request_bytes
        self._expected = f"Bearer {token}".encode() if token else None
        self._run = submit or self._queued

    async def _queued(self, runner: ModelRunner, feeds: Feeds) -> Feeds:
        if runner.quick_for(feeds):  # a short pass on small inputs: on this thread when a session is free, none waits
            outputs = runner.run_now(feeds)
            if outputs is not None:
                return outputs
        return await asyncio.wrap_future(self.repository.submit(runner, feeds))

    def authorized(self, given: str) -> bool:
        return self._expected is None or hmac.compare_digest(given.encode(), self._expected)

    def guarded(self, handler: Handler) -> Handler:
        """``handler`` behind the token check, with every failure turned into the protocol's error body."""

        async def endpoint(request: Request) -> Response:
            if not self.authorized(request.headers.get("authorization", "")):
                return _json({"error": _UNAUTHORIZED}, 401)
            try:
                return await handler(request)
            except Exception as exc:
                return error_response(exc)

        return endpoint

    async def live(self, request: Request) -> Response:
        return _json({"live": True})

    async def ready(self, request: Request) -> Response:
        state = self.repository.ready
        return _json({"ready": state}, 200 if state else 503)

    async def server_metadata(self, request: Request) -> Response:
        return _json(self.repository.server_metadata())

    async def model_metadata(self, request: Request) -> Response:
        params = request.path_params
        return _json(self.repository.model_metadata(params["name"], params.get("version")))

    async def model_ready(self, request: Request) -> Response:
        params = request.path_params
        runner = self.repository.runner(params["name"], params.get("version"))
        body: dict[str, Any] = {"name": runner.model.name, "ready": runner.ready}
        if runner.problem:
            body["error"] = runner.problem
        return _json(body, 200 if runner.ready else 503)

    async def answer(
        self,
        name: str,
        version: str | None,
        read: Callable[[], Awaitable[bytes | memoryview]],
        header_length: str | None,
    ) -> tuple[bytes, list[memoryview]]:
        """One infer request, counted: the reply's JSON header and its binary outputs (none: JSON only)."""
        repository = self.repository
        arrived = time.perf_counter()
        runner: ModelRunner | None = None
        try:
            runner = repository.runner(name, version)
            body = await read()
            regions = repository.shared_memory
            decode = (runner.model.name, runner.checks, list(runner.outputs), body, header_length, regions)
            if header_length is None and len(body) > _JSON_INLINE_BYTES:
                feeds, wanted = await run_in_threadpool(decode_http, *decode)
            else:
                feeds, wanted = decode_http(*decode)
            outputs = await self._run(runner, feeds)
            reply = encode_http_parts(runner.model.name, runner.model.version, outputs, wanted, regions)
        except Exception as exc:
            repository.count_failure(runner, exc, arrived)
            raise
        repository.count_success(runner, arrived)
        return reply

    async def infer(self, request: Request) -> Response:
        params = request.path_params
        header, buffers = await self.answer(
            params["name"],
            params.get("version"),
            lambda: read_body(request, self.max_request_bytes),
            request.headers.get(HEADER_LENGTH),
        )
        if not buffers:
            return Response(header, media_type="application/json")
        # the join copies each output once, straight from its buffer
        content = b"".join([header, *buffers])
        return Response(content, media_type="application/octet-stream", headers={HEADER_LENGTH: str(len(header))})

    async def infer_asgi(self, scope: Scope, receive: Receive, send: Send, name: str, version: str | None) -> None:
        """The infer route as plain ASGI (``V2App``'s ``raw_infer``)."""
        headers = first_headers(scope, ("authorization", "content-length", HEADER_LENGTH.lower()))
        if not self.authorized(headers.get("authorization", "")):
            await _json({"error": _UNAUTHORIZED}, 401)(scope, receive, send)
            return
        try:
            header, buffers = await self.answer(
                name,
                version,
                lambda: receive_body(scope, receive, headers.get("content-length"), self.max_request_bytes),
                headers.get(HEADER_LENGTH.lower()),
            )
        except Exception as exc:
            await error_response(exc)(scope, receive, send)
            return
        await send_reply(send, header, buffers)

    async def model_config(self, request: Request) -> Response:
        params = request.path_params
        return _json(self.repository.model_config(params["name"], params.get("version")))

    async def statistics(self, request: Request) -> Response:
        params = request.path_params
        return _json(self.repository.statistics(params.get("name"), params.get("version")))

    async def repository_index(self, request: Request) -> Response:
        body = await read_body(request, _CONTROL_BYTES, fixed=True)
        ready = parse_json(body, "index request").get("ready", False) if body.strip() else False
        if not isinstance(ready, bool):
            raise RequestError(
                f"index request | 'ready' is {ready!r:.40}, expected true or false.",
                hint='send {"ready": true} for the ready models only, or no body.',
            )
        return _json(self.repository.index(ready))

    async def repository_load(self, request: Request) -> Response:
        body = await read_body(request, self.max_request_bytes)
        parameters = _load_parameters(parse_json(body, "load request") if body.strip() else {})
        await run_in_threadpool(self.repository.load, request.path_params["name"], parameters)
        return _json({})

    async def repository_unload(self, request: Request) -> Response:
        body = await read_body(request, _CONTROL_BYTES, fixed=True)
        _load_parameters(parse_json(body, "unload request") if body.strip() else {})
        await run_in_threadpool(self.repository.unload, request.path_params["name"])
        return _json({})

    async def shm_status(self, request: Request) -> Response:
        return _json(self.repository.shared_memory.status(request.path_params.get("region")))

    async def shm_register(self, request: Request) -> Response:
        body = parse_json(await read_body(request, _CONTROL_BYTES, fixed=True), "register request")
        self.repository.shared_memory.register(
            request.path_params["region"], body.get("key"), body.get("offset", 0), body.get("byte_size")
        )
        return _json({})

    async def shm_unregister(self, request: Request) -> Response:
        self.repository.shared_memory.unregister(request.path_params.get("region"))
        return _json({})

    def routes(self) -> list[Route]:
        """Every route, each behind ``guarded``; a model's routes with and without its version."""
        from deploykit.serve.pipelines import image_route

        image = image_route(self.repository, self.max_request_bytes, read_body)
        model_routes: list[tuple[str, Handler, str]] = [
            ("", self.model_metadata, "GET"),
            ("/ready", self.model_ready, "GET"),
            ("/infer", self.infer, "POST"),
            ("/config", self.model_config, "GET"),
            ("/stats", self.statistics, "GET"),
            ("/image", image, "POST"),
        ]
        guarded = self.guarded
        routes = [
            Route("/v2/health/live", guarded(self.live), methods=["GET"]),
            Route("/v2/health/ready", guarded(self.ready), methods=["GET"]),
            Route("/v2", guarded(self.server_metadata), methods=["GET"]),
            # before /v2/models/{name}, which would take 'stats' for a model's name
            Route("/v2/models/stats", guarded(self.statistics), methods=["GET"]),
            Route("/v2/repository/index", guarded(self.repository_index), methods=["POST"]),
            Route("/v2/repository/models/{name}/load", guarded(self.repository_load), methods=["POST"]),
            Route("/v2/repository/models/{name}/unload", guarded(self.repository_unload), methods=["POST"]),
            Route("/v2/systemsharedmemory/status", guarded(self.shm_status), methods=["GET"]),
            Route("/v2/systemsharedmemory/region/{region}/status", guarded(self.shm_status), methods=["GET"]),
            Route("/v2/systemsharedmemory/region/{region}/register", guarded(self.shm_register), methods=["POST"]),
            Route("/v2/systemsharedmemory/unregister", guarded(self.shm_unregister), methods=["POST"]),
            Route("/v2/systemsharedmemory/region/{region}/unregister", guarded(self.shm_unregister), methods=["POST"]),
        ]
        for suffix, handler, method in model_routes:
            wrapped = guarded(handler)
            routes.append(Route(f"/v2/models/{{name}}/versions/{{version}}{suffix}", wrapped, methods=[method]))
            routes.append(Route(f"/v2/models/{{name}}{suffix}", wrapped, methods=[method]))
        return routes


async def _not_found(request: Request, exc: Exception) -> Response:
    return _json({"error": f"route '{request.url.path:.200}' | is not a v2 route. Hint: see GET /v2."}, 404)


async def _not_allowed(request: Request, exc: Exception) -> Response:
    return _json({"error": f"route '{request.url.path:.200}' | does not take {request.method}."}, 405)


def create_app(
    repository: Repository,
    *,
    token: str | None = None,
    max_request_bytes: int = 64 << 20,
    submit: Submit | None = None,
    raw_infer: bool = False,
) -> V2App:
    """The ASGI app serving ``repository`` (bounded bodies, an optional bearer token).

    ``submit`` runs a checked request; by default it queues it on the model's runner (its batcher).
    ``raw_infer`` answers the infer route as plain ASGI, sending the outputs as memoryviews (see the
    module's docstring): for uvicorn, not for an ASGI server that pickles its messages.
    """
    handlers = _V2Handlers(repository, token, max_request_bytes, submit)
    return V2App(
        routes=handlers.routes(),
        exception_handlers={404: _not_found, 405: _not_allowed},
        raw_infer=handlers.infer_asgi if raw_infer else None,
    )


def _load_parameters(request: dict[str, Any]) -> dict[str, Any]:
    """A load or unload request's ``parameters`` object (empty when there is none)."""
    parameters = request.get("parameters", {})
    if parameters is None:  # null: none, as when the key is absent
        return {}
    if not isinstance(parameters, dict):  # an empty list, 0 or "" too: never taken for no parameters
        raise RequestError(
            f"repository request | 'parameters' is {type(parameters).__name__}, expected an object.",
            hint='send {"parameters": {...}} or an empty body.',
        )
    return parameters
