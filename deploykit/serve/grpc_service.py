"""The KServe v2 gRPC front end: ``inference.GRPCInferenceService`` over a ``Repository``.

The messages come from ``v2_messages`` (declared in code, wire-compatible with the protocol's
``grpc_service.proto``). Implemented: ServerLive, ServerReady, ModelReady, ServerMetadata,
ModelMetadata, ModelInfer (raw contents and typed contents). The other RPCs (repository control,
shared memory, streaming, statistics, trace) answer UNIMPLEMENTED, as gRPC does for unknown methods.
"""

from __future__ import annotations

import hmac
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
import numpy as np

from deploykit.errors import DeployKitError, RequestError
from deploykit.io import one_line
from deploykit.serve.protocol import (
    InputCheck,
    array_from_bytes,
    array_from_list,
    check_names,
    check_shape,
    error_text,
    statuses,
)
from deploykit.serve.protocol import v2_datatype as datatype_of
from deploykit.serve.repository import Repository
from deploykit.serve.runner import ModelRunner

log = logging.getLogger("deploykit.serve")

_CONTENTS = {
    "BOOL": "bool_contents", "INT8": "int_contents", "INT16": "int_contents", "INT32": "int_contents",
    "INT64": "int64_contents", "UINT8": "uint_contents", "UINT16": "uint_contents", "UINT32": "uint_contents",
    "UINT64": "uint64_contents", "FP32": "fp32_contents", "FP64": "fp64_contents",
}  # fmt: skip


def grpc_code(error: BaseException) -> grpc.StatusCode:
    code: grpc.StatusCode = getattr(grpc.StatusCode, statuses(error)[1])
    return code


def _decode(runner: ModelRunner, request: Any) -> dict[str, np.ndarray]:
    checks: dict[str, InputCheck] = runner.checks
    names = [tensor.name for tensor in request.inputs]
    check_names(runner.model.name, checks, names)
    raw = request.raw_input_contents
    if raw and len(raw) != len(request.inputs):
        raise RequestError(
            f"request | has {len(raw)} raw_input_contents for {len(request.inputs)} inputs.",
            hint="send one raw_input_contents entry per input, in input order (or none and typed contents).",
        )
    feeds: dict[str, np.ndarray] = {}
    for index, tensor in enumerate(request.inputs):
        check = checks[tensor.name]
        shape = check_shape(tensor.name, list(tensor.shape))
        check.check(tensor.datatype, shape)
        if raw:
            if tensor.HasField("contents") and any(tensor.contents.ListFields()):
                raise RequestError(  # which of the two is meant cannot be told
                    f"input '{tensor.name}' | has both contents and raw_input_contents.",
                    hint="send the tensor once: its bytes in raw_input_contents (as tritonclient does) or contents.",
                )
            feeds[tensor.name] = array_from_bytes(check, shape, raw[index])
            continue
        field = _CONTENTS.get(tensor.datatype)
        if field is None or not tensor.HasField("contents"):
            raise RequestError(
                f"input '{tensor.name}' | has no data: neither raw_input_contents nor contents.{field or '?'}.",
                hint="send the tensor's bytes in raw_input_contents (as tritonclient does).",
            )
        feeds[tensor.name] = array_from_list(check, shape, list(getattr(tensor.contents, field)))
    return feeds


def create_server(
    repository: Repository, host: str, port: int, *, token: str | None, max_request_bytes: int, threads: int = 32
) -> tuple[grpc.Server, int]:
    """A started-later gRPC server for ``repository`` and the port it bound."""
    from deploykit.serve.v2_messages import SERVICE, messages

    pb = messages()
    expected = f"Bearer {token}".encode() if token else None

    class Servicer:
        def _check(self, context: Any) -> None:
            if expected is None:
                return
            given = dict(context.invocation_metadata()).get("authorization", "")
            if not hmac.compare_digest(str(given).encode(), expected):
                context.abort(grpc.StatusCode.UNAUTHENTICATED, "request | no valid bearer token. "
                              "Hint: send metadata authorization: Bearer TOKEN.")  # fmt: skip

        def _fail(self, context: Any, exc: BaseException) -> Any:
            if not isinstance(exc, DeployKitError):
                log.exception("unexpected error while answering a gRPC request", exc_info=exc)
            # the text may quote the request (a model name, a version): one line, controls shown, as in a terminal
            context.abort(grpc_code(exc), one_line(error_text(exc), None))

        def ServerLive(self, request: Any, context: Any) -> Any:
            self._check(context)
            return pb["ServerLiveResponse"](live=True)

        def ServerReady(self, request: Any, context: Any) -> Any:
            self._check(context)
            return pb["ServerReadyResponse"](ready=repository.ready)

        def ModelReady(self, request: Any, context: Any) -> Any:
            self._check(context)
            try:
                runner = repository.runner(request.name, request.version)
            except DeployKitError as exc:
                return self._fail(context, exc)
            return pb["ModelReadyResponse"](ready=runner.ready)

        def ServerMetadata(self, request: Any, context: Any) -> Any:
            self._check(context)
            return pb["ServerMetadataResponse"](**repository.server_metadata())

        def ModelMetadata(self, request: Any, context: Any) -> Any:
            self._check(context)
            try:
                data = repository.model_metadata(request.name, request.version)
            except DeployKitError as exc:
                return self._fail(context, exc)
            tensor = pb["ModelMetadataResponse.TensorMetadata"]
            return pb["ModelMetadataResponse"](
                name=data["name"], versions=data["versions"], platform=data["platform"],
                inputs=[tensor(**t) for t in data["inputs"]], outputs=[tensor(**t) for t in data["outputs"]],
            )  # fmt: skip

        def ModelInfer(self, request: Any, context: Any) -> Any:
            self._check(context)
            arrived = time.perf_counter()
            runner: ModelRunner | None = None
            try:
                runner = repository.runner(request.model_name, request.model_version)
                feeds = _decode(runner, request)
                wanted = [o.name for o in request.outputs] or list(runner.outputs)
                for name in wanted:
                    if name not in runner.outputs:
                        raise RequestError(
                            f"output '{name}' | is not an output of model '{runner.model.name}'; its outputs are "
                            f"{', '.join(repr(n) for n in runner.outputs)}.",
                        )
                outputs = runner.run_now(feeds)
                if outputs is None:
                    outputs = repository.submit(runner, feeds).result()
            except Exception as exc:
                repository.count_failure(runner, exc)
                return self._fail(context, exc)
            response = pb["ModelInferResponse"](model_name=runner.model.name, model_version=runner.model.version,
                                             id=request.id)  # fmt: skip
            for name in wanted:
                array = outputs[name]
                response.outputs.add(name=name, datatype=datatype_of(array.dtype), shape=list(array.shape))
                response.raw_output_contents.append(np.ascontiguousarray(array).tobytes())
            repository.count_success(runner, arrived)
            return response

    server = grpc.server(
        ThreadPoolExecutor(max_workers=threads, thread_name_prefix="serve-grpc"),
        options=[("grpc.max_receive_message_length", max_request_bytes), ("grpc.max_send_message_length", -1),
                 ("grpc.so_reuseport", 0)],
    )  # fmt: skip
    servicer = Servicer()
    handlers = {
        method: grpc.unary_unary_rpc_method_handler(
            getattr(servicer, method),
            request_deserializer=pb[f"{method}Request"].FromString,
            response_serializer=pb[f"{method}Response"].SerializeToString,
        )
        for method in ("ServerLive", "ServerReady", "ModelReady", "ServerMetadata", "ModelMetadata", "ModelInfer")
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    try:  # grpcio returns 0 for a port it cannot bind, or (newer releases) raises RuntimeError
        bound = server.add_insecure_port(f"{_bracket(host)}:{port}")
    except RuntimeError:
        bound = 0
    if bound == 0:
        from deploykit.errors import UsageError

        raise UsageError(
            f"--grpc-port {port} | cannot bind {host}:{port}: the port is in use (by another process, or "
            "given to --http-port or --metrics-port too).",
            hint="pass another port, or 0 for a free one.",
        )
    return server, bound


def _bracket(host: str) -> str:
    return f"[{host}]" if ":" in host else host
