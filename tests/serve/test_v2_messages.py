"""deploykit's v2 gRPC messages are the protocol's on the wire: every field as tritonclient's generated stubs
of ``grpc_service.proto`` declare it, and a message one side writes the other reads back unchanged."""

from __future__ import annotations

from deploykit.serve.v2_messages import messages
from tests.assets.paths import require_module

service_pb2 = require_module("tritonclient.grpc.service_pb2", "pip install 'tritonclient[grpc]'")
model_config_pb2 = require_module("tritonclient.grpc.model_config_pb2", "pip install 'tritonclient[grpc]'")
# Triton's extensions (model configuration, statistics, repository): deploykit declares the fields it fills
EXTENSIONS = ("ModelConfig", "ModelParameter", "ModelInput", "ModelOutput", "ModelInstanceGroup",
              "ModelDynamicBatching", "ModelStatistics")  # fmt: skip


def _generated(name: str):
    first, *rest = name.split(".")
    found = getattr(service_pb2, first, None) or getattr(model_config_pb2, first)
    for part in rest:
        found = getattr(found, part)
    return found


def _fields(descriptor) -> list[tuple]:
    # map entry types are nested per field in the generated stubs and shared per message here: same wire form
    return sorted((f.name, f.number, f.type, f.is_repeated,
                   f.message_type.name if f.message_type else None,
                   f.enum_type.full_name if f.enum_type else None) for f in descriptor.fields)  # fmt: skip


def test_every_message_has_the_protocol_fields():
    ours = messages()
    assert len(ours) == 53  # 33 messages of the service and model_config.proto, and 20 nested ones
    for name, cls in ours.items():
        assert cls.DESCRIPTOR.full_name == _generated(name).DESCRIPTOR.full_name
        if name.split(".")[0] in EXTENSIONS:
            assert set(_fields(cls.DESCRIPTOR)) <= set(_fields(_generated(name).DESCRIPTOR)), name
        else:
            assert _fields(cls.DESCRIPTOR) == _fields(_generated(name).DESCRIPTOR), name


def test_the_enums_are_numbered_as_model_config_proto_numbers_them():
    ours = messages()
    for field, generated in [(ours["ModelInput"].DESCRIPTOR.fields_by_name["data_type"], model_config_pb2.DataType),
                             (ours["ModelInstanceGroup"].DESCRIPTOR.fields_by_name["kind"],
                              model_config_pb2.ModelInstanceGroup.Kind)]:  # fmt: skip
        assert {v.name: v.number for v in field.enum_type.values} == dict(generated.items())


def test_infer_messages_round_trip_between_the_two():
    request = service_pb2.ModelInferRequest(model_name="m", model_version="1", id="r")
    request.parameters["priority"].int64_param = 3
    tensor = request.inputs.add(name="x", datatype="FP32", shape=[1, 2])
    tensor.parameters["binary_data_size"].int64_param = 8
    tensor.contents.fp32_contents.extend([1.5, 2.5])
    request.outputs.add(name="y").parameters["classification"].int64_param = 2
    request.raw_input_contents.append(b"\x00" * 8)
    ours = messages()["ModelInferRequest"].FromString(request.SerializeToString())
    assert ours.inputs[0].contents.fp32_contents == [1.5, 2.5] and ours.parameters["priority"].int64_param == 3
    assert ours.outputs[0].parameters["classification"].WhichOneof("parameter_choice") == "int64_param"
    assert service_pb2.ModelInferRequest.FromString(ours.SerializeToString()) == request
    response = messages()["ModelInferResponse"](model_name="m", id="r", raw_output_contents=[b"abc"])
    response.outputs.add(name="y", datatype="INT64", shape=[-1, 4])
    assert service_pb2.ModelInferResponse.FromString(response.SerializeToString()).outputs[0].shape == [-1, 4]


def test_raw_contents_are_split_and_joined_as_protobuf_writes_them():
    """The server's own walk of the wire format (no copies) against protobuf's parser and writer."""
    import numpy as np
    import pytest

    from deploykit.serve.v2_messages import RAW_INPUT_FIELD, RAW_OUTPUT_FIELD, WireError, join_field, split_field

    big = np.random.default_rng(0).random(300_000, dtype=np.float32).tobytes()  # a multi-byte length varint
    request = service_pb2.ModelInferRequest(model_name="m", id="r")
    request.inputs.add(name="x", datatype="FP32", shape=[300_000])
    request.inputs.add(name="e", datatype="FP32", shape=[0])
    request.raw_input_contents.extend([big, b""])
    request.parameters["priority"].int64_param = 2
    data = request.SerializeToString()
    rest, raw = split_field(data, RAW_INPUT_FIELD)
    assert [bytes(r) for r in raw] == [big, b""]
    assert all(r.obj is data for r in raw)  # views of the received bytes, not copies
    parsed = service_pb2.ModelInferRequest.FromString(rest)
    assert (
        not parsed.raw_input_contents
        and parsed.inputs[0].name == "x"
        and parsed.parameters["priority"].int64_param == 2
    )
    # truncated; a length with no bytes after it; wire type 7; a varint longer than 64 bits
    for broken in (data[:-1], data[:2], b"\x0f\x00", b"\xff" * 11):
        with pytest.raises(WireError):
            split_field(broken, RAW_INPUT_FIELD)

    head = service_pb2.ModelInferResponse(model_name="m", model_version="1")
    head.outputs.add(name="y", datatype="FP32", shape=[300_000])
    head.outputs.add(name="z", datatype="FP32", shape=[0])
    joined = join_field(head.SerializeToString(), RAW_OUTPUT_FIELD, [memoryview(big), memoryview(b"")])
    expected = service_pb2.ModelInferResponse()
    expected.CopyFrom(head)
    expected.raw_output_contents.extend([big, b""])
    assert service_pb2.ModelInferResponse.FromString(joined) == expected
    assert joined == expected.SerializeToString()
