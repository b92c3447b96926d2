"""The KServe v2 gRPC front end: ``inference.GRPCInferenceService`` over a ``Repository``.

The messages come from ``v2_messages`` (declared in code, wire-compatible with the protocol's
``grpc_service.proto``). Implemented: ServerLive, ServerReady, ModelReady, ServerMetadata,
ModelMetadata, ModelInfer (raw contents, typed contents and system shared memory), the system
shared-memory RPCs (register, unregister, status), and Triton's ModelConfig, ModelStatistics,
RepositoryIndex, RepositoryModelLoad and RepositoryModelUnload (their answers are the dicts the
HTTP front end sends as JSON, parsed into the messages). The other RPCs (CUDA shared memory,
streaming, trace, logging) answer UNIMPLEMENTED, as gRPC does for unknown methods.
"""

from __future__ import annotations

import errno
import hmac
import logging
import socket
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import grpc
import numpy as np
from google.protobuf import json_format
from google.protobuf.message import DecodeError

from deploykit.errors import DeployKitError, RequestError
from deploykit.io import one_line
from deploykit.serve.protocol import (
    InputCheck,
    OutputRequest,
    array_from_bytes,
    array_from_list,
    check_names,
    check_shape,
    error_text,
    region_target,
    shared_input,
    statuses,
    write_shared_outputs,
)
from deploykit.serve.protocol import v2_datatype as datatype_of
from deploykit.serve.repository import Repository
from deploykit.serve.runner import ModelRunner
from deploykit.serve.shared_memory import BYTE_SIZE, REGION, SharedMemoryRegions
from deploykit.serve.v2_messages import (
    RAW_INPUT_FIELD,
    RAW_OUTPUT_FIELD,
    SERVICE,
    WireError,
    join_field,
    messages,
    split_field,
)

log = logging.getLogger("deploykit.serve")

_CONTENTS = {
    "BOOL": "bool_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
}


def grpc_code(error: BaseException) -> grpc.StatusCode:
    code: grpc.StatusCode = getattr(grpc.StatusCode, statuses(error)[1])
    return code


@dataclass(frozen=True)
class _InferRequest:
    """A ModelInfer request as received: the message without its raw contents, and those as views of
    the received bytes (``v2_messages.split_field``); ``error`` when the bytes were not a message."""

    message: Any
    raw: list[memoryview]
    error: str | None = None


@dataclass(frozen=True)
class _InferReply:
    """A ModelInfer response: the message without its raw contents, and each output's bytes."""

    message: Any
    raw: list[memoryview]

    def serialize(self) -> bytes:
        return join_field(self.message.SerializeToString(), RAW_OUTPUT_FIELD, self.raw)


def _raw_view(array: np.ndarray) -> memoryview:
    """An output's bytes in row-major order, without a copy where it already is contiguous."""
    if array.dtype.kind == "O":
        return memoryview(array.tobytes())
    return np.ascontiguousarray(array).reshape(-1).view(np.uint8).data


def _parameters(entries: Any) -> dict[str, Any]:
    """A v2 ``map<string, InferParameter>`` as plain values."""
    values: dict[str, Any] = {}
    for key, parameter in entries.items():
        kind = parameter.WhichOneof("parameter_choice")
        values[key] = getattr(parameter, kind) if kind else None
    return values


def _decode(
    runner: ModelRunner, request: Any, raw: list[memoryview], regions: SharedMemoryRegions
) -> dict[str, np.ndarray]:
    """Feeds from raw contents (one entry per input not in shared memory, in input order), typed
    contents or shared-memory regions."""
    checks: dict[str, InputCheck] = runner.checks
    names = [tensor.name for tensor in request.inputs]
    check_names(runner.model.name, checks, names)
    parameters = [_parameters(tensor.parameters) for tensor in request.inputs]
    in_memory = [REGION in p for p in parameters]
    sent = len(request.inputs) - sum(in_memory)
    if raw and len(raw) != sent:
        raise RequestError(
            f"request | has {len(raw)} raw_input_contents for {sent} inputs"
            + (f" ({len(request.inputs) - sent} more in shared memory)." if sent < len(request.inputs) else "."),
            hint="send one raw_input_contents entry per input not in shared memory, in input order (or none "
            "and typed contents).",
        )
    feeds: dict[str, np.ndarray] = {}
    next_raw = iter(raw)
    for tensor, tensor_parameters, shared in zip(request.inputs, parameters, in_memory, strict=True):
        check = checks[tensor.name]
        shape = check_shape(tensor.name, list(tensor.shape))
        check.check(tensor.datatype, shape)
        has_contents = tensor.HasField("contents") and any(tensor.contents.ListFields())
        if shared:
            if has_contents:
                raise RequestError(
                    f"input '{tensor.name}' | names a shared-memory region and also sends contents.",
                    hint="send the tensor once.",
                )
            feeds[tensor.name] = shared_input(regions, check, shape, tensor_parameters)
            continue
        if raw:
            if has_contents:
                raise RequestError(  # which of the two is meant cannot be told
                    f"input '{tensor.name}' | has both contents and raw_input_contents.",
                    hint="send the tensor once: its bytes in raw_input_contents (as tritonclient does) or contents.",
                )
            feeds[tensor.name] = array_from_bytes(check, shape, next(next_raw))
            continue
        field = _CONTENTS.get(tensor.datatype)
        if field is None or not tensor.HasField("contents"):
            raise RequestError(
                f"input '{tensor.name}' | has no data: neither raw_input_contents nor contents.{field or '?'}.",
                hint="send the tensor's bytes in raw_input_contents (as tritonclient does).",
            )
        feeds[tensor.name] = array_from_list(check, shape, list(getattr(tensor.contents, field)))
    return feeds


def _wanted(runner: ModelRunner, request: Any) -> OutputRequest:
    """The outputs a request asks for (all when it names none), and which go to shared memory."""
    names, shared = [], []
    for output in request.outputs:
        if output.name not in runner.outputs:
            raise RequestError(
                f"output '{output.name}' | is not an output of model '{runner.model.name}'; its outputs are "
                f"{', '.join(repr(n) for n in runner.outputs)}.",
            )
        names.append(output.name)
        shared.append(region_target(_parameters(output.parameters)))
    if not names:
        names = list(runner.outputs)
        shared = [None] * len(names)
    return OutputRequest(tuple(names), (True,) * len(names), request.id or None, tuple(shared))


class _Servicer:
    """The v2 ``GRPCInferenceService`` methods on ``repository``: each checks the bearer token when the
    server has one, and answers the protocol's error (``grpc_code``) with the house's text."""

    def __init__(self, repository: Repository, pb: dict[str, Any], token: str | None) -> None:
        self._repository = repository
        self._pb = pb
        self._expected = f"Bearer {token}".encode() if token else None

    def read_infer(self, data: bytes) -> _InferRequest:
        """A ``ModelInferRequest`` whose raw inputs stay views of ``data`` (or why it is not one)."""
        try:
            rest, raw = split_field(data, RAW_INPUT_FIELD)
            return _InferRequest(self._pb["ModelInferRequest"].FromString(rest), raw)
        except (WireError, DecodeError) as exc:
            return _InferRequest(None, [], f"request | is not a ModelInferRequest message ({exc}).")

    def _check(self, context: Any) -> None:
        if self._expected is None:
            return
        given = dict(context.invocation_metadata()).get("authorization", "")
        if not hmac.compare_digest(str(given).encode(), self._expected):
            context.abort(
                grpc.StatusCode.UNAUTHENTICATED,
                "request | no valid bearer token. Hint: send metadata authorization: Bearer TOKEN.",
            )

    def _fail(self, context: Any, exc: BaseException) -> Any:
        if not isinstance(exc, DeployKitError):
            log.exception("unexpected error while answering a gRPC request", exc_info=exc)
        # the text may quote the request (a model name, a version): one line, controls shown, as in a terminal
        context.abort(grpc_code(exc), one_line(error_text(exc), None))

    def ServerLive(self, request: Any, context: Any) -> Any:
        self._check(context)
        return self._pb["ServerLiveResponse"](live=True)

    def ServerReady(self, request: Any, context: Any) -> Any:
        self._check(context)
        return self._pb["ServerReadyResponse"](ready=self._repository.ready)

    def ModelReady(self, request: Any, context: Any) -> Any:
        self._check(context)
        try:
            runner = self._repository.runner(request.name, request.version)
        except DeployKitError as exc:
            return self._fail(context, exc)
        return self._pb["ModelReadyResponse"](ready=runner.ready)

    def ServerMetadata(self, request: Any, context: Any) -> Any:
        self._check(context)
        return self._pb["ServerMetadataResponse"](**self._repository.server_metadata())

    def ModelMetadata(self, request: Any, context: Any) -> Any:
        self._check(context)
        try:
            data = self._repository.model_metadata(request.name, request.version)
        except DeployKitError as exc:
            return self._fail(context, exc)
        tensor = self._pb["ModelMetadataResponse.TensorMetadata"]
        return self._pb["ModelMetadataResponse"](
            name=data["name"],
            versions=data["versions"],
            platform=data["platform"],
            inputs=[tensor(**t) for t in data["inputs"]],
            outputs=[tensor(**t) for t in data["outputs"]],
        )

    def ModelInfer(self, received: _InferRequest, context: Any) -> Any:
        self._check(context)
        arrived = time.perf_counter()
        runner: ModelRunner | None = None
        request = received.message
        try:
            if received.error is not None:
                raise RequestError(received.error, hint="send a ModelInferRequest of the v2 grpc_service.proto.")
            runner = self._repository.runner(request.model_name, request.model_version)
            regions = self._repository.shared_memory
            feeds = _decode(runner, request, received.raw, regions)
            wanted = _wanted(runner, request)
            outputs = runner.run_now(feeds)
            if outputs is None:
                outputs = self._repository.submit(runner, feeds).result()
            shared = write_shared_outputs(regions, outputs, wanted)
        except Exception as exc:
            self._repository.count_failure(runner, exc, arrived)
            return self._fail(context, exc)
        response = self._pb["ModelInferResponse"](
            model_name=runner.model.name, model_version=runner.model.version, id=request.id
        )
        raw: list[memoryview] = []
        for name in wanted.names:
            array = outputs[name]
            tensor = response.outputs.add(name=name, datatype=datatype_of(array.dtype), shape=list(array.shape))
            if name in shared:  # written to the client's region: only its description travels, and an
                # empty raw entry, because clients (tritonclient) find an output's bytes by its index
                tensor.parameters[REGION].string_param = shared[name][REGION]
                tensor.parameters[BYTE_SIZE].int64_param = shared[name][BYTE_SIZE]
                raw.append(memoryview(b""))
            else:
                raw.append(_raw_view(array))
        self._repository.count_success(runner, arrived)
        return _InferReply(response, raw)

    def _answer(self, context: Any, message: str, produce: Callable[[], Any]) -> Any:
        """``message`` parsed from the dict ``produce`` returns (the HTTP front end's JSON), or the
        protocol's error."""
        self._check(context)
        try:
            return json_format.ParseDict(produce(), self._pb[message]())
        except Exception as exc:  # anything unexpected is INTERNAL with the house text, logged
            return self._fail(context, exc)

    def ModelConfig(self, request: Any, context: Any) -> Any:
        produce = lambda: {"config": self._repository.model_config(request.name, request.version)}  # noqa: E731
        return self._answer(context, "ModelConfigResponse", produce)

    def ModelStatistics(self, request: Any, context: Any) -> Any:
        produce = lambda: self._repository.statistics(request.name, request.version)  # noqa: E731
        return self._answer(context, "ModelStatisticsResponse", produce)

    def RepositoryIndex(self, request: Any, context: Any) -> Any:
        produce = lambda: {"models": self._repository.index(request.ready)}  # noqa: E731
        return self._answer(context, "RepositoryIndexResponse", produce)

    def RepositoryModelLoad(self, request: Any, context: Any) -> Any:
        def produce() -> dict[str, Any]:
            self._repository.load(request.model_name, _parameters(request.parameters))
            return {}

        return self._answer(context, "RepositoryModelLoadResponse", produce)

    def RepositoryModelUnload(self, request: Any, context: Any) -> Any:
        def produce() -> dict[str, Any]:
            self._repository.unload(request.model_name)
            return {}

        return self._answer(context, "RepositoryModelUnloadResponse", produce)

    def SystemSharedMemoryStatus(self, request: Any, context: Any) -> Any:
        self._check(context)
        try:
            regions = self._repository.shared_memory.status(request.name or None)
        except DeployKitError as exc:
            return self._fail(context, exc)
        status = self._pb["SystemSharedMemoryStatusResponse.RegionStatus"]
        response = self._pb["SystemSharedMemoryStatusResponse"]()
        for region in regions:
            response.regions[region["name"]].CopyFrom(status(**region))
        return response

    def SystemSharedMemoryRegister(self, request: Any, context: Any) -> Any:
        self._check(context)
        try:
            self._repository.shared_memory.register(request.name, request.key, request.offset, request.byte_size)
        except DeployKitError as exc:
            return self._fail(context, exc)
        return self._pb["SystemSharedMemoryRegisterResponse"]()

    def SystemSharedMemoryUnregister(self, request: Any, context: Any) -> Any:
        self._check(context)
        try:
            self._repository.shared_memory.unregister(request.name or None)
        except DeployKitError as exc:
            return self._fail(context, exc)
        return self._pb["SystemSharedMemoryUnregisterResponse"]()


def create_server(
    repository: Repository, host: str, port: int, *, token: str | None, max_request_bytes: int, threads: int = 32
) -> tuple[grpc.Server, int]:
    """A started-later gRPC server for ``repository`` and the port it bound."""
    pb = messages()

    server = grpc.server(
        ThreadPoolExecutor(max_workers=threads, thread_name_prefix="serve-grpc"),
        options=[
            ("grpc.max_receive_message_length", max_request_bytes),
            ("grpc.max_send_message_length", -1),
            ("grpc.so_reuseport", 0),
        ],
    )
    servicer = _Servicer(repository, pb, token)
    handlers = {
        method: grpc.unary_unary_rpc_method_handler(
            getattr(servicer, method),
            request_deserializer=pb[f"{method}Request"].FromString,
            response_serializer=pb[f"{method}Response"].SerializeToString,
        )
        for method in (
            "ServerLive",
            "ServerReady",
            "ModelReady",
            "ServerMetadata",
            "ModelMetadata",
            "SystemSharedMemoryStatus",
            "SystemSharedMemoryRegister",
            "SystemSharedMemoryUnregister",
            "ModelConfig",
            "ModelStatistics",
            "RepositoryIndex",
            "RepositoryModelLoad",
            "RepositoryModelUnload",
        )
    }
    # ModelInfer's tensors cross as views of the received bytes and are joined once into the reply
    handlers["ModelInfer"] = grpc.unary_unary_rpc_method_handler(
        servicer.ModelInfer, request_deserializer=servicer.read_infer, response_serializer=_InferReply.serialize
    )
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    bound = 0
    if not _in_use(host, port):  # else gRPC's core would log its own bind error on stderr beside ours
        try:  # grpcio returns 0 for a port it cannot bind, or (newer releases) raises RuntimeError
            bound = server.add_insecure_port(f"{_bracket(host)}:{port}")
        except RuntimeError:
            bound = 0
    if bound == 0:  # grpcio does not say why; a port given to two flags is refused before (ServerSettings)
        from deploykit.errors import ResourceError

        raise ResourceError(
            f"--grpc-port {port} | cannot bind {host}:{port}: the port is in use by another process.",
            hint="pass another port, or 0 for a free one.",
        )
    return server, bound


def _in_use(host: str, port: int) -> bool:
    """Whether another socket listens on ``host:port`` now, asked the way gRPC binds (``SO_REUSEADDR``:
    a port left in TIME_WAIT by a server just stopped is free). Port 0 is never in use."""
    if port == 0:
        return False
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            return exc.errno == errno.EADDRINUSE
    return False


def _bracket(host: str) -> str:
    return f"[{host}]" if ":" in host else host
