"""deploykit's v2 gRPC messages are the protocol's on the wire: every field as tritonclient's generated stubs
of ``grpc_service.proto`` declare it, and a message one side writes the other reads back unchanged."""

from __future__ import annotations

from deploykit.serve.v2_messages import messages
from tests.assets.paths import require_module

service_pb2 = require_module("tritonclient.grpc.service_pb2", "pip install 'tritonclient[grpc]'")


def _generated(name: str):
    found = service_pb2
    for part in name.split("."):
        found = getattr(found, part)
    return found


def _fields(descriptor) -> list[tuple]:
    # map entry types are nested per field in the generated stubs and shared per message here: same wire form
    return sorted((f.name, f.number, f.type, f.is_repeated,
                   f.message_type.name if f.message_type else None) for f in descriptor.fields)  # fmt: skip


def test_every_message_has_the_protocol_fields():
    ours = messages()
    assert len(ours) == 20
    for name, cls in ours.items():
        assert cls.DESCRIPTOR.full_name == _generated(name).DESCRIPTOR.full_name
        assert _fields(cls.DESCRIPTOR) == _fields(_generated(name).DESCRIPTOR), name


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
