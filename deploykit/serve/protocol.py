"""The KServe v2 (Open Inference Protocol) tensor codec, shared by the HTTP and gRPC front ends.

Datatype names, checking a request's tensors against the model's inputs before anything is queued
(so every error names the tensor and what was expected), JSON and binary-extension bodies, and
which protocol status each ``ServeError`` becomes. It must not import a runtime or a web framework.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from deploykit.errors import (
    DeployKitError,
    InputError,
    ModelLoadError,
    ModelNotServedError,
    ModelUnavailableError,
    RequestError,
    RequestTooLargeError,
    UnsupportedRequestError,
)
from deploykit.serve.shared_memory import BYTE_SIZE, OFFSET, REGION, SharedMemoryRegions
from deploykit.tensors import TensorSpec

HEADER_LENGTH = "Inference-Header-Content-Length"

_DATATYPES: dict[str, str] = {
    "bool": "BOOL",
    "uint8": "UINT8",
    "uint16": "UINT16",
    "uint32": "UINT32",
    "uint64": "UINT64",
    "int8": "INT8",
    "int16": "INT16",
    "int32": "INT32",
    "int64": "INT64",
    "float16": "FP16",
    "float32": "FP32",
    "float64": "FP64",
    "bfloat16": "BF16",
    "object": "BYTES",
}
_NUMPY = {v2: name for name, v2 in _DATATYPES.items() if v2 not in ("BF16", "BYTES")}
# looked up on every request's inputs and outputs: a dtype's ``.name`` is built by numpy in Python (~3 µs)
_BY_DTYPE: dict[Any, str] = {np.dtype(name): v2 for name, v2 in _DATATYPES.items() if v2 != "BF16"}


def v2_datatype(dtype: np.dtype[Any]) -> str:
    """The protocol's datatype name (``FP32``, ``INT64`` ...) for a numpy dtype."""
    try:
        return _BY_DTYPE[dtype]
    except (KeyError, TypeError):  # a type or a name rather than a dtype, a byte-swapped or extension dtype
        return _DATATYPES.get(np.dtype(dtype).name, "BYTES")


def v2_shape(spec: TensorSpec) -> list[int]:
    """The shape as the protocol writes it: ``-1`` for every dynamic axis."""
    return [d if isinstance(d, int) else -1 for d in spec.shape or ()]


def tensor_metadata(spec: TensorSpec) -> dict[str, Any]:
    return {"name": spec.name, "datatype": v2_datatype(spec.dtype), "shape": v2_shape(spec)}


# What each failure is answered with: (error classes, HTTP status, gRPC status code name); first match wins.
_STATUSES: tuple[tuple[tuple[type[BaseException], ...], int, str], ...] = (
    ((RequestTooLargeError,), 413, "RESOURCE_EXHAUSTED"),
    ((UnsupportedRequestError,), 400, "UNIMPLEMENTED"),
    ((RequestError, InputError, ModelLoadError), 400, "INVALID_ARGUMENT"),
    ((ModelNotServedError,), 404, "NOT_FOUND"),
    ((ModelUnavailableError,), 503, "UNAVAILABLE"),
)


def statuses(error: BaseException) -> tuple[int, str]:
    """The HTTP status and the gRPC status code name a failure is answered with."""
    for kinds, http, grpc in _STATUSES:
        if isinstance(error, kinds):
            return http, grpc
    return 500, "INTERNAL"


def http_status(error: BaseException) -> int:
    return statuses(error)[0]


def error_text(error: BaseException) -> str:
    """What a response says about a failure: the house message, never a traceback."""
    if isinstance(error, DeployKitError):
        return str(error)
    return f"internal error | {type(error).__name__} while answering the request. Hint: see the server's log."


def _shape_text(shape: Sequence[int]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def check_shape(name: str, shape: Any) -> tuple[int, ...]:
    """A request's ``shape`` field as a tuple of non-negative ints."""
    if not isinstance(shape, (list, tuple)) or not all(
        isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape
    ):
        raise RequestError(
            f"input '{name}' | shape {shape!r:.80} is not a list of non-negative integers.",
            hint="write the shape as e.g. [1, 3, 224, 224].",
        )
    return tuple(int(d) for d in shape)


@dataclass(frozen=True)
class InputCheck:
    """One model input as the protocol sees it: the datatype and shape a request must send."""

    spec: TensorSpec

    @property
    def datatype(self) -> str:
        return v2_datatype(self.spec.dtype)

    def check(self, datatype: Any, shape: tuple[int, ...]) -> None:
        """Refuse a datatype or shape the input does not take (the same rules as the session)."""
        name = self.spec.name
        if datatype != self.datatype:
            raise RequestError(
                f"input '{name}' | got datatype {datatype!s:.40}, expected {self.datatype}.",
                hint=f"send the tensor as {self.datatype}; the server does not cast.",
            )
        expected = v2_shape(self.spec)
        if self.spec.shape is None:
            return
        if len(shape) != len(expected) or any(e != -1 and e != s for e, s in zip(expected, shape, strict=False)):
            raise RequestError(
                f"input '{name}' | got shape {_shape_text(shape)}, expected {_shape_text(expected)} (-1: any size).",
                hint="see the model's metadata (GET /v2/models/NAME) for its inputs.",
            )


def check_names(model: str, checks: Mapping[str, InputCheck], given: Sequence[str]) -> None:
    """Every input once, no other."""
    seen: set[str] = set()
    for name in given:
        if name in seen:
            raise RequestError(f"input '{name}' | is sent twice.", hint="send each input once.")
        seen.add(name)
        if name not in checks:
            raise RequestError(
                f"input '{name}' | is not an input of model '{model}'; its inputs are "
                f"{', '.join(repr(n) for n in checks)}.",
                hint="see the model's metadata (GET /v2/models/NAME).",
            )
    missing = [name for name in checks if name not in seen]
    if missing:
        raise RequestError(
            f"model '{model}' | the request lacks input(s) {', '.join(repr(n) for n in missing)}.",
            hint="send every input the model's metadata lists.",
        )


def array_from_bytes(check: InputCheck, shape: tuple[int, ...], raw: bytes | memoryview) -> np.ndarray:
    """A binary tensor (the binary data extension, or gRPC's raw contents) as an array of ``shape``."""
    dtype = check.spec.dtype
    expected = math.prod(shape) * dtype.itemsize
    if len(raw) != expected:
        raise RequestError(
            f"input '{check.spec.name}' | has {len(raw)} bytes of data, expected {expected} "
            f"({math.prod(shape)} {check.datatype} elements for shape {_shape_text(shape)}).",
            hint="send exactly shape × element size bytes, in row-major order.",
        )
    return np.frombuffer(raw, dtype=dtype).reshape(shape)


def array_from_list(check: InputCheck, shape: tuple[int, ...], data: Any) -> np.ndarray:
    """A JSON tensor's ``data`` (flat or nested, row-major) as an array of ``shape``."""
    name = check.spec.name
    try:
        array = np.asarray(data)
    except (ValueError, TypeError) as exc:
        raise RequestError(
            f"input '{name}' | data is not a (nested) list of numbers.", hint="send a flat list in row-major order."
        ) from exc
    if array.dtype.kind not in "biuf" or (array.dtype.kind == "b") != (check.spec.dtype.kind == "b"):
        held = {"U": "strings", "b": "true/false"}.get(array.dtype.kind, array.dtype.name)
        raise RequestError(
            f"input '{name}' | data holds {held}, expected {check.datatype} "
            f"{'true/false values' if check.spec.dtype.kind == 'b' else 'numbers'}.",
            hint="send numbers (true/false for BOOL only; the server does not cast).",
        )
    if check.spec.dtype.kind in "iu" and array.dtype.kind == "f":
        raise RequestError(
            f"input '{name}' | data holds fractional numbers, expected {check.datatype} integers.",
            hint="send whole numbers for an integer input.",
        )
    count = math.prod(shape)
    if array.size != count:
        raise RequestError(
            f"input '{name}' | has {array.size} data elements, expected {count} for shape {_shape_text(shape)}.",
            hint="send one value per element of the shape, row-major.",
        )
    with np.errstate(over="ignore", invalid="ignore"):
        converted = array.reshape(shape).astype(check.spec.dtype)
    if check.spec.dtype.kind in "iu" and not np.array_equal(converted, array.reshape(shape)):
        raise RequestError(
            f"input '{name}' | data does not fit {check.datatype}.", hint="send values within the datatype's range."
        )
    if check.spec.dtype.kind == "f" and np.any(np.isinf(converted) & np.isfinite(array.reshape(shape))):
        raise RequestError(
            f"input '{name}' | data holds a number beyond {check.datatype}'s range, which would become infinity.",
            hint=f"send values within ±{float(np.finfo(check.spec.dtype).max):.4g}.",
        )
    return converted


def parse_json(body: bytes | bytearray | memoryview, what: str = "request") -> dict[str, Any]:
    """A JSON object, or a protocol error that says where it broke."""
    try:
        value = json.loads(bytes(body))
    except (UnicodeDecodeError, ValueError) as exc:
        raise RequestError(
            f"{what} | is not valid JSON ({exc}).", hint="send a JSON object as the v2 protocol describes."
        ) from exc
    except RecursionError as exc:  # '[' * 50000: no request nests so deep
        raise RequestError(
            f"{what} | is JSON nested too deeply to read; a v2 request is a few levels deep.",
            hint="send the tensor's data as a flat list (row-major) or as binary data.",
        ) from exc
    if not isinstance(value, dict):
        raise RequestError(
            f"{what} | is JSON but not an object.", hint="send a JSON object as the v2 protocol describes."
        )
    return value


@dataclass(frozen=True)
class OutputRequest:
    """Which outputs a request wants, whether each comes back as binary data, and the request's id."""

    names: tuple[str, ...]
    binary: tuple[bool, ...]
    request_id: str | None = None
    #: per output, where to write it when the request names a shared-memory region: (region, offset, byte size)
    shared: tuple[tuple[Any, Any, Any] | None, ...] = ()

    def region_of(self, index: int) -> tuple[Any, Any, Any] | None:
        return self.shared[index] if index < len(self.shared) else None


def region_target(parameters: Any) -> tuple[Any, Any, Any] | None:
    """Where a requested output's parameters ask for it to be written: (region, offset, byte size),
    checked when it is written; None when they name no shared-memory region."""
    if not isinstance(parameters, Mapping) or REGION not in parameters:
        return None
    return parameters[REGION], parameters.get(OFFSET), parameters.get(BYTE_SIZE)


def shared_input(
    regions: SharedMemoryRegions | None, check: InputCheck, shape: tuple[int, ...], parameters: Mapping[str, Any]
) -> np.ndarray:
    """An input that names a shared-memory region, as an array viewing that memory."""
    name = check.spec.name
    if regions is None:
        raise RequestError(
            f"input '{name}' | names a shared-memory region; this server offers none.",
            hint="send the tensor in the request.",
        )
    raw = regions.read(f"input '{name}'", parameters[REGION], parameters.get(OFFSET), parameters.get(BYTE_SIZE))
    return array_from_bytes(check, shape, raw)


def write_shared_outputs(
    regions: SharedMemoryRegions | None, results: Mapping[str, np.ndarray], wanted: OutputRequest
) -> dict[str, dict[str, Any]]:
    """Write every output the request asked for in shared memory; their response parameters, by name."""
    written: dict[str, dict[str, Any]] = {}
    for index, name in enumerate(wanted.names):
        target = wanted.region_of(index)
        if target is None:
            continue
        if regions is None:
            raise RequestError(
                f"output '{name}' | names a shared-memory region; this server offers none.",
                hint="ask for the output in the response.",
            )
        region, offset, byte_size = target
        array = results[name]
        regions.write(f"output '{name}'", region, offset, byte_size, array)
        written[name] = {REGION: region, BYTE_SIZE: array.nbytes}
    return written


def decode_http(
    model: str,
    checks: Mapping[str, InputCheck],
    outputs: Sequence[str],
    body: bytes | memoryview,
    header_length: str | None,
    regions: SharedMemoryRegions | None = None,
) -> tuple[dict[str, np.ndarray], OutputRequest]:
    """An HTTP infer body (JSON, or JSON + binary tensors, or tensors in shared-memory ``regions``)
    → feeds and the outputs asked for."""
    if header_length is None:
        header, binary = body, memoryview(b"")
    else:
        digits = header_length.strip()  # decimal digits only: int() would take '1_0', '+10' and other scripts' digits
        length = int(digits) if digits.isascii() and digits.isdigit() else -1
        if not 0 < length <= len(body):
            raise RequestError(
                f"header {HEADER_LENGTH} | is {header_length!r:.40}, expected the JSON header's length in bytes "
                f"(1 to {len(body)}).",
                hint="set it to the byte length of the JSON part that starts the body.",
            )
        header, binary = body[:length], memoryview(body)[length:]
    request = parse_json(header)
    inputs = request.get("inputs")
    if not isinstance(inputs, list) or not all(isinstance(i, dict) for i in inputs):
        raise RequestError(
            "request | has no 'inputs' list of tensor objects.",
            hint='send {"inputs": [{"name": ..., "datatype": ..., "shape": [...], "data": [...]}]}.',
        )
    names = [i.get("name") for i in inputs]
    if not all(isinstance(n, str) for n in names):
        raise RequestError("request | an input has no 'name' string.", hint="name every input tensor.")
    check_names(model, checks, names)
    feeds: dict[str, np.ndarray] = {}
    offset = 0
    for tensor, name in zip(inputs, names, strict=True):
        check = checks[name]
        shape = check_shape(name, tensor.get("shape"))
        check.check(tensor.get("datatype"), shape)
        parameters = _parameters(tensor.get("parameters"), f"input '{name}'")
        size = parameters.get("binary_data_size")
        if REGION in parameters:
            if size is not None or "data" in tensor:
                raise RequestError(
                    f"input '{name}' | names a shared-memory region and also sends data.",
                    hint="send the tensor once: in the region, as binary data, or as 'data'.",
                )
            feeds[name] = shared_input(regions, check, shape, parameters)
        elif size is not None:
            if not isinstance(size, int) or isinstance(size, bool) or size < 0 or offset + size > len(binary):
                raise RequestError(
                    f"input '{name}' | binary_data_size {size!r:.40} runs past the {len(binary)} binary bytes "
                    f"after the JSON header (offset {offset}).",
                    hint=f"send the tensors' bytes after the header, in input order, and set {HEADER_LENGTH}.",
                )
            feeds[name] = array_from_bytes(check, shape, binary[offset : offset + size])
            offset += size
        elif "data" in tensor:
            feeds[name] = array_from_list(check, shape, tensor["data"])
        else:
            raise RequestError(
                f"input '{name}' | has neither 'data' nor parameters.binary_data_size.",
                hint="send the values as 'data', or as binary data after the JSON header.",
            )
    if offset != len(binary):
        raise RequestError(
            f"request | has {len(binary) - offset} binary bytes that no input's binary_data_size claims.",
            hint=f"check {HEADER_LENGTH} and each input's binary_data_size.",
        )
    return feeds, _outputs_wanted(model, request, outputs)


def _parameters(value: Any, subject: str) -> dict[str, Any]:
    """A request's or an output's ``parameters`` object (absent or null: none)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise RequestError(
            f"{subject} | 'parameters' is {type(value).__name__}, expected an object.",
            hint='send e.g. "parameters": {"binary_data": true}, or leave it out.',
        )
    return value


def _flag(parameters: dict[str, Any], key: str, default: bool, subject: str) -> bool:
    """A true/false parameter (absent or null: ``default``); any other value is refused: the string "false"
    would read as true."""
    value = parameters.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise RequestError(
            f"{subject} | parameters.{key} is {value!r:.40}, expected true or false.",
            hint=f'send "{key}": true or false (JSON booleans), or leave it out.',
        )
    return value


def _outputs_wanted(model: str, request: dict[str, Any], outputs: Sequence[str]) -> OutputRequest:
    default_binary = _flag(_parameters(request.get("parameters"), "request"), "binary_data_output", False, "request")
    identifier = request.get("id") if isinstance(request.get("id"), str) else None
    wanted = request.get("outputs")
    if wanted is None:
        return OutputRequest(tuple(outputs), (default_binary,) * len(outputs), identifier)
    if not isinstance(wanted, list) or not all(isinstance(o, dict) and isinstance(o.get("name"), str) for o in wanted):
        raise RequestError("request | 'outputs' is not a list of {\"name\": ...} objects.", hint="name each output.")
    names, binary, shared = [], [], []
    for entry in wanted:
        name = entry["name"]
        if name not in outputs:
            raise RequestError(
                f"output '{name}' | is not an output of model '{model}'; its outputs are "
                f"{', '.join(repr(n) for n in outputs)}.",
                hint="see the model's metadata (GET /v2/models/NAME).",
            )
        entry_parameters = _parameters(entry.get("parameters"), f"output '{name}'")
        names.append(name)
        binary.append(_flag(entry_parameters, "binary_data", default_binary, f"output '{name}'"))
        shared.append(region_target(entry_parameters))
    return OutputRequest(tuple(names), tuple(binary), identifier, tuple(shared))


def encode_http(
    model: str,
    version: str,
    results: Mapping[str, np.ndarray],
    wanted: OutputRequest,
    regions: SharedMemoryRegions | None = None,
) -> tuple[bytes, int | None]:
    """The infer response body and, when any output is binary, the JSON header's length. Outputs
    asked for in shared memory are written there first (``write_shared_outputs``)."""
    header, buffers = encode_http_parts(model, version, results, wanted, regions)
    if not buffers:
        return header, None
    # the join copies each output once, straight from its buffer (tobytes first would copy it twice)
    return b"".join([header, *buffers]), len(header)


def encode_http_parts(
    model: str,
    version: str,
    results: Mapping[str, np.ndarray],
    wanted: OutputRequest,
    regions: SharedMemoryRegions | None = None,
) -> tuple[bytes, list[memoryview]]:
    """The infer response as its JSON header and the binary outputs' bytes (flat views of the arrays, in
    the header's order, not copied): a front end that can send them one after the other joins nothing."""
    shared = write_shared_outputs(regions, results, wanted)
    tensors: list[dict[str, Any]] = []
    arrays: list[np.ndarray] = []
    for name, binary in zip(wanted.names, wanted.binary, strict=True):
        array = results[name]
        entry: dict[str, Any] = {"name": name, "datatype": v2_datatype(array.dtype), "shape": list(array.shape)}
        if name in shared:
            entry["parameters"] = shared[name]
        elif binary:
            entry["parameters"] = {"binary_data_size": array.nbytes}
            arrays.append(array)
        else:
            if array.dtype.kind in "fc" and not np.isfinite(array).all():
                raise RequestError(
                    f"output '{name}' | holds NaN or infinity, which JSON cannot carry (the body would not be JSON).",
                    hint=f'ask for \'{name}\' as binary data: "outputs": [{{"name": "{name}", "parameters": '
                    '{"binary_data": true}}] (tritonclient: binary_data=True).',
                )
            entry["data"] = array.reshape(-1).tolist()
        tensors.append(entry)
    response: dict[str, Any] = {"model_name": model, "model_version": version, "outputs": tensors}
    if wanted.request_id:
        response["id"] = wanted.request_id
    header = json.dumps(response, separators=(",", ":")).encode()
    return header, [np.ascontiguousarray(a).reshape(-1).view(np.uint8).data for a in arrays]
