"""The KServe v2 gRPC messages deploykit answers with, described in code (no generated stubs, no protoc).

The Open Inference Protocol's ``grpc_service.proto`` (package ``inference``) fixes the message and
field names and numbers on the wire; this module declares the subset the server implements, in its
own descriptor pool, so it neither needs ``grpcio-tools`` nor clashes with a client's generated
stubs loaded in the same process (tritonclient registers the same names in the default pool). The
model-configuration, statistics and repository extensions' messages (Triton's ``grpc_service.proto``
and ``model_config.proto``) are declared with the fields deploykit fills, at their numbers there.
Only protobuf is imported.
"""

from __future__ import annotations

from functools import cache
from typing import Any

SERVICE = "inference.GRPCInferenceService"
_PACKAGE = "inference"

# One field per entry: "NAME NUMBER [repeated] TYPE", TYPE a scalar (bool, string, int64 ...) or a
# message name (nested first, then the package's). A nested ``ParametersEntry`` is a map<string, InferParameter>.
_TENSOR = ["name 1 string", "datatype 2 string", "shape 3 repeated int64"]
_WITH_CONTENTS = [*_TENSOR, "parameters 4 repeated ParametersEntry", "contents 5 InferTensorContents"]
_HEAD = ["model_name 1 string", "model_version 2 string", "id 3 string", "parameters 4 repeated ParametersEntry"]
_ENTRY = {"ParametersEntry": ["key 1 string", "value 2 InferParameter"]}
_NAME_VERSION = ["name 1 string", "version 2 string"]
_PHASES = ("success", "fail", "queue", "compute_input", "compute_infer", "compute_output", "cache_hit", "cache_miss")
_MESSAGES: dict[str, tuple[list[str], dict[str, list[str]]]] = {
    "ServerLiveRequest": ([], {}),
    "ServerLiveResponse": (["live 1 bool"], {}),
    "ServerReadyRequest": ([], {}),
    "ServerReadyResponse": (["ready 1 bool"], {}),
    "ModelReadyRequest": (_NAME_VERSION, {}),
    "ModelReadyResponse": (["ready 1 bool"], {}),
    "ServerMetadataRequest": ([], {}),
    "ServerMetadataResponse": (["name 1 string", "version 2 string", "extensions 3 repeated string"], {}),
    "ModelMetadataRequest": (_NAME_VERSION, {}),
    "ModelMetadataResponse": (
        [
            "name 1 string",
            "versions 2 repeated string",
            "platform 3 string",
            "inputs 4 repeated TensorMetadata",
            "outputs 5 repeated TensorMetadata",
        ],
        {"TensorMetadata": _TENSOR},
    ),
    "InferParameter": (
        [
            "bool_param 1 bool",
            "int64_param 2 int64",
            "string_param 3 string",
            "double_param 4 double",
            "uint64_param 5 uint64",
        ],
        {},
    ),
    "InferTensorContents": (
        [
            "bool_contents 1 repeated bool",
            "int_contents 2 repeated int32",
            "int64_contents 3 repeated int64",
            "uint_contents 4 repeated uint32",
            "uint64_contents 5 repeated uint64",
            "fp32_contents 6 repeated float",
            "fp64_contents 7 repeated double",
            "bytes_contents 8 repeated bytes",
        ],
        {},
    ),
    "ModelInferRequest": (
        [
            *_HEAD,
            "inputs 5 repeated InferInputTensor",
            "outputs 6 repeated InferRequestedOutputTensor",
            "raw_input_contents 7 repeated bytes",
        ],
        {
            **_ENTRY,
            "InferInputTensor": _WITH_CONTENTS,
            "InferRequestedOutputTensor": ["name 1 string", "parameters 2 repeated ParametersEntry"],
        },
    ),
    "ModelInferResponse": (
        [*_HEAD, "outputs 5 repeated InferOutputTensor", "raw_output_contents 6 repeated bytes"],
        {**_ENTRY, "InferOutputTensor": _WITH_CONTENTS},
    ),
    # the system shared-memory extension
    "SystemSharedMemoryStatusRequest": (["name 1 string"], {}),
    "SystemSharedMemoryStatusResponse": (
        ["regions 1 repeated RegionsEntry"],
        {
            "RegionStatus": ["name 1 string", "key 2 string", "offset 3 uint64", "byte_size 4 uint64"],
            "RegionsEntry": ["key 1 string", "value 2 RegionStatus"],
        },
    ),
    "SystemSharedMemoryRegisterRequest": (
        ["name 1 string", "key 2 string", "offset 3 uint64", "byte_size 4 uint64"],
        {},
    ),
    "SystemSharedMemoryRegisterResponse": ([], {}),
    "SystemSharedMemoryUnregisterRequest": (["name 1 string"], {}),
    "SystemSharedMemoryUnregisterResponse": ([], {}),
    # the model-configuration extension (ModelConfig and its parts: model_config.proto)
    "ModelConfigRequest": (_NAME_VERSION, {}),
    "ModelConfigResponse": (["config 1 ModelConfig"], {}),
    "ModelConfig": (
        [
            "name 1 string",
            "platform 2 string",
            "backend 17 string",
            "max_batch_size 4 int32",
            "input 5 repeated ModelInput",
            "output 6 repeated ModelOutput",
            "instance_group 7 repeated ModelInstanceGroup",
            "dynamic_batching 11 ModelDynamicBatching",
            "parameters 14 repeated ParametersEntry",
        ],
        {"ParametersEntry": ["key 1 string", "value 2 ModelParameter"]},
    ),
    "ModelParameter": (["string_value 1 string"], {}),
    "ModelInput": (["name 1 string", "data_type 2 DataType", "dims 4 repeated int64"], {}),
    "ModelOutput": (["name 1 string", "data_type 2 DataType", "dims 3 repeated int64"], {}),
    "ModelInstanceGroup": (["name 1 string", "count 2 int32", "gpus 3 repeated int32", "kind 4 Kind"], {}),
    "ModelDynamicBatching": (["preferred_batch_size 1 repeated int32", "max_queue_delay_microseconds 2 uint64"], {}),
    # the statistics extension
    "ModelStatisticsRequest": (_NAME_VERSION, {}),
    "ModelStatisticsResponse": (["model_stats 1 repeated ModelStatistics"], {}),
    "StatisticDuration": (["count 1 uint64", "ns 2 uint64"], {}),
    "InferStatistics": ([f"{name} {number} StatisticDuration" for number, name in enumerate(_PHASES, start=1)], {}),
    "InferBatchStatistics": (
        [
            "batch_size 1 uint64",
            "compute_input 2 StatisticDuration",
            "compute_infer 3 StatisticDuration",
            "compute_output 4 StatisticDuration",
        ],
        {},
    ),
    "ModelStatistics": (
        [
            "name 1 string",
            "version 2 string",
            "last_inference 3 uint64",
            "inference_count 4 uint64",
            "execution_count 5 uint64",
            "inference_stats 6 InferStatistics",
            "batch_stats 7 repeated InferBatchStatistics",
        ],
        {},
    ),
    # the repository extension
    "RepositoryIndexRequest": (["repository_name 1 string", "ready 2 bool"], {}),
    "RepositoryIndexResponse": (
        ["models 1 repeated ModelIndex"],
        {"ModelIndex": ["name 1 string", "version 2 string", "state 3 string", "reason 4 string"]},
    ),
    "ModelRepositoryParameter": (
        ["bool_param 1 bool", "int64_param 2 int64", "string_param 3 string", "bytes_param 4 bytes"],
        {},
    ),
    "RepositoryModelLoadRequest": (
        ["repository_name 1 string", "model_name 2 string", "parameters 3 repeated ParametersEntry"],
        {"ParametersEntry": ["key 1 string", "value 2 ModelRepositoryParameter"]},
    ),
    "RepositoryModelLoadResponse": ([], {}),
    "RepositoryModelUnloadRequest": (
        ["repository_name 1 string", "model_name 2 string", "parameters 3 repeated ParametersEntry"],
        {"ParametersEntry": ["key 1 string", "value 2 ModelRepositoryParameter"]},
    ),
    "RepositoryModelUnloadResponse": ([], {}),
}
# Enums by name, as model_config.proto numbers them: the package's, and one nested in a message.
_DATA_TYPES = (
    "INVALID",
    "BOOL",
    "UINT8",
    "UINT16",
    "UINT32",
    "UINT64",
    "INT8",
    "INT16",
    "INT32",
    "INT64",
    "FP16",
    "FP32",
    "FP64",
    "STRING",
    "BF16",
)
_ENUMS: dict[str, list[str]] = {
    "DataType": [f"TYPE_{name}" for name in _DATA_TYPES],
    "ModelInstanceGroup.Kind": ["KIND_AUTO", "KIND_GPU", "KIND_CPU", "KIND_MODEL"],
}
_ONE_OF = {"InferParameter": "parameter_choice", "ModelRepositoryParameter": "parameter_choice"}
"""Messages whose fields are all one ``oneof``."""


def _add_fields(descriptor: Any, fields: list[str], scope: str, nested: dict[str, list[str]], pb: Any) -> None:
    oneof = _ONE_OF.get(descriptor.name) if scope.endswith(f".{descriptor.name}") else None
    if oneof:
        descriptor.oneof_decl.add(name=oneof)
    for text in fields:
        name, number, *rest = text.split()
        kind = rest[-1]
        field = descriptor.field.add(name=name, number=int(number))
        field.label = (
            pb.FieldDescriptorProto.LABEL_REPEATED if "repeated" in rest else pb.FieldDescriptorProto.LABEL_OPTIONAL
        )
        enum = f"{scope.rsplit('.', 1)[-1]}.{kind}"
        if enum in _ENUMS or kind in _ENUMS:
            field.type = pb.FieldDescriptorProto.TYPE_ENUM
            field.type_name = f".{_PACKAGE}.{enum if enum in _ENUMS else kind}"
        elif kind[0].isupper():
            field.type = pb.FieldDescriptorProto.TYPE_MESSAGE
            field.type_name = f"{scope}.{kind}" if kind in nested else f".{_PACKAGE}.{kind}"
        else:
            field.type = getattr(pb.FieldDescriptorProto, f"TYPE_{kind.upper()}")
        if oneof:
            field.oneof_index = 0


@cache
def messages() -> dict[str, Any]:
    """Message name → message class (nested ones as ``Outer.Inner``)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    file = descriptor_pb2.FileDescriptorProto(name="deploykit_kserve_v2.proto", package=_PACKAGE, syntax="proto3")
    for qualified, values in _ENUMS.items():
        outer, _, enum_name = qualified.rpartition(".")
        if not outer:
            file.enum_type.add(name=enum_name, value=[{"name": v, "number": i} for i, v in enumerate(values)])
    for name, (fields, nested) in _MESSAGES.items():
        message = file.message_type.add(name=name)
        for qualified, values in _ENUMS.items():
            if qualified.startswith(f"{name}."):
                enum_name = qualified.rpartition(".")[2]
                message.enum_type.add(name=enum_name, value=[{"name": v, "number": i} for i, v in enumerate(values)])
        scope = f".{_PACKAGE}.{name}"
        _add_fields(message, fields, scope, nested, descriptor_pb2)
        for inner_name, inner_fields in nested.items():
            inner = message.nested_type.add(name=inner_name)
            _add_fields(inner, inner_fields, scope, nested, descriptor_pb2)
            inner.options.map_entry = inner_name.endswith("Entry")  # map<string, ...>
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    classes: dict[str, Any] = {}
    for name, (_, nested) in _MESSAGES.items():
        classes[name] = message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{_PACKAGE}.{name}"))
        for inner_name in nested:
            full = f"{_PACKAGE}.{name}.{inner_name}"
            classes[f"{name}.{inner_name}"] = message_factory.GetMessageClass(pool.FindMessageTypeByName(full))
    return classes


# The raw tensor bytes on the wire, without protobuf's copies. ``ModelInferRequest.raw_input_contents``
# (field 7) and ``ModelInferResponse.raw_output_contents`` (field 6) carry megabytes; parsed by
# protobuf, each request's bytes are copied into the message and again into a ``bytes`` on access,
# and a response's into the message and again into its serialization. The top level of the wire
# format is simple enough to walk here: the request's raw contents become views of the received
# bytes, and a response is its small header message followed by each output's bytes, joined once.
RAW_INPUT_FIELD = 7
RAW_OUTPUT_FIELD = 6


class WireError(ValueError):
    """The bytes are not a protobuf message (a truncated or corrupt request)."""


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise WireError(f"a varint runs past the message's end or past 64 bits (at byte {pos})")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def split_field(data: bytes, number: int) -> tuple[bytes, list[memoryview]]:
    """``data`` (a serialized message) without its top-level length-delimited field ``number``, and
    that field's values in order, as views of ``data`` (no copy)."""
    view = memoryview(data)
    rest: list[memoryview] = []
    values: list[memoryview] = []
    pos, end = 0, len(data)
    while pos < end:
        start = pos
        key, pos = _varint(data, pos)
        kind = key & 7
        if kind == 0:
            _, pos = _varint(data, pos)
        elif kind == 1:
            pos += 8
        elif kind == 5:
            pos += 4
        elif kind == 2:
            length, pos = _varint(data, pos)
            if pos + length > end:
                raise WireError(f"field {key >> 3} declares {length} bytes, {end - pos} are left")
            if key >> 3 == number:
                values.append(view[pos : pos + length])
                pos += length
                continue
            pos += length
        else:
            raise WireError(f"field {key >> 3} has wire type {kind}, which proto3 messages do not use")
        if pos > end:
            raise WireError(f"field {key >> 3} runs past the message's end")
        rest.append(view[start:pos])
    return b"".join(rest), values


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def join_field(head: bytes, number: int, values: list[memoryview]) -> bytes:
    """``head`` (a serialized message) with ``values`` appended as its repeated bytes field ``number``:
    what protobuf would write, with each value copied once."""
    tag = _encode_varint(number << 3 | 2)
    parts: list[bytes | memoryview] = [head]
    for value in values:
        parts += [tag, _encode_varint(value.nbytes), value]
    return b"".join(parts)
