"""Every bad request gets the protocol's error naming the tensor and what was expected; the server survives.

HTTP requests are sent raw with httpx (so malformed bodies really are malformed); gRPC ones with tritonclient.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import httpx
import numpy as np
import pytest

from deploykit.serve import BatchPolicy, ServedModel, Server, ServerSettings
from tests.assets.paths import require_module

grpcclient = require_module("tritonclient.grpc", "pip install 'tritonclient[http,grpc]'")
from tritonclient.utils import InferenceServerException  # noqa: E402

LIMIT = 64 * 1024
TENSOR = {"name": "x", "datatype": "FP32", "shape": [1, 8], "data": [0.5] * 8}


@pytest.fixture(scope="module")
def server(catalog_paths) -> Iterator[Server]:
    models = [ServedModel.from_path(catalog_paths["mlp_dynamic_batch"], name="mlp"),
              ServedModel.from_path(catalog_paths["int64_embedding"], name="embed")]  # fmt: skip
    settings = ServerSettings(http_port=0, grpc_port=0, metrics_port=None, max_request_bytes=LIMIT)
    with Server(models, BatchPolicy(), settings) as running:
        assert running.wait_ready(30)
        yield running


@pytest.fixture(scope="module")
def client(server) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=f"http://127.0.0.1:{server.http_port}", timeout=10) as http:
        yield http


def _error(response: httpx.Response, status: int) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and "Traceback" not in body["error"]
    return str(body["error"])


def _infer(client, body, model="mlp", **kwargs) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return client.post(f"/v2/models/{model}/infer", content=content, **kwargs)


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        ({"inputs": [{**TENSOR, "name": "y"}]}, 400, "input 'y' | is not an input of model 'mlp'; its inputs are 'x'"),
        ({"inputs": []}, 400, "model 'mlp' | the request lacks input(s) 'x'"),
        ({"inputs": [TENSOR, TENSOR]}, 400, "input 'x' | is sent twice"),
        ({"inputs": [{**TENSOR, "datatype": "FP64"}]}, 400, "input 'x' | got datatype FP64, expected FP32"),
        (
            {"inputs": [{**TENSOR, "shape": [1, 9], "data": [0.5] * 9}]},
            400,
            "input 'x' | got shape [1, 9], expected [-1, 8] (-1: any size)",
        ),
        ({"inputs": [{**TENSOR, "shape": [8]}]}, 400, "input 'x' | got shape [8], expected [-1, 8]"),
        (
            {"inputs": [{**TENSOR, "data": [0.5] * 7}]},
            400,
            "input 'x' | has 7 data elements, expected 8 for shape [1, 8]",
        ),
        ({"inputs": [{**TENSOR, "data": ["a"] * 8}]}, 400, "input 'x' | data holds strings, expected FP32 numbers"),
        ({"inputs": [{**TENSOR, "data": [True] * 8}]}, 400, "input 'x' | data holds true/false, expected FP32 numbers"),
        (
            {"inputs": [{**TENSOR, "data": [1e39] + [0.5] * 7}]},
            400,
            "input 'x' | data holds a number beyond FP32's range, which would become infinity",
        ),
        (
            {"inputs": [{**TENSOR, "shape": "1x8"}]},
            400,
            "input 'x' | shape '1x8' is not a list of non-negative integers",
        ),
        (
            {"inputs": [{k: v for k, v in TENSOR.items() if k != "data"}]},
            400,
            "input 'x' | has neither 'data' nor parameters.binary_data_size",
        ),
        ({"inputs": [TENSOR], "outputs": [{"name": "z"}]}, 400, "output 'z' | is not an output of model 'mlp'"),
        (  # a string "false" would read as true: the output came back binary
            {"inputs": [TENSOR], "outputs": [{"name": "y", "parameters": {"binary_data": "false"}}]},
            400,
            "output 'y' | parameters.binary_data is 'false', expected true or false.",
        ),
        (
            {"inputs": [TENSOR], "parameters": {"binary_data_output": 1}},
            400,
            "request | parameters.binary_data_output is 1, expected true or false.",
        ),
        ({"inputs": [TENSOR], "parameters": [1]}, 400, "request | 'parameters' is list, expected an object."),
        ({"inputs": [{**TENSOR, "parameters": []}]}, 400, "input 'x' | 'parameters' is list, expected an object."),
        (
            {"inputs": [TENSOR], "outputs": [{"name": "y", "parameters": "binary"}]},
            400,
            "output 'y' | 'parameters' is str, expected an object.",
        ),
        ({"tensors": []}, 400, "request | has no 'inputs' list of tensor objects"),
        ([1, 2], 400, "request | is JSON but not an object"),
        (b'{"inputs": [', 400, "request | is not valid JSON"),
        (b"\xff\xfe", 400, "request | is not valid JSON"),
        (b"[" * 20000 + b"]" * 20000, 400, "request | is JSON nested too deeply to read"),  # was a 500
    ],
)
def test_a_bad_json_request_is_a_400_naming_what_was_expected(client, body, status, message):
    assert message in _error(_infer(client, body), status)


def test_integer_inputs_refuse_fractions_and_values_out_of_range(client):
    tensor = {"name": "indices", "datatype": "INT64", "shape": [1, 5]}
    error = _error(_infer(client, {"inputs": [{**tensor, "data": [0.5, 1, 2, 3, 4]}]}, "embed"), 400)
    assert "input 'indices' | data holds fractional numbers, expected INT64 integers" in error
    error = _error(_infer(client, {"inputs": [{**tensor, "data": [2**70, 1, 2, 3, 4]}]}, "embed"), 400)
    assert "input 'indices'" in error


def _binary(header: dict, data: bytes, length: int | None = None) -> tuple[bytes, dict[str, str]]:
    head = json.dumps(header).encode()
    return head + data, {"Inference-Header-Content-Length": str(len(head) if length is None else length)}


def test_bad_binary_requests(client):
    tensor = {"name": "x", "datatype": "FP32", "shape": [1, 8], "parameters": {"binary_data_size": 32}}
    data = np.ones((1, 8), np.float32).tobytes()
    body, headers = _binary({"inputs": [tensor]}, data[:28] + b"")
    assert "binary_data_size 32 runs past the 28 binary bytes" in _error(_infer(client, body, headers=headers), 400)
    short = {**tensor, "parameters": {"binary_data_size": 28}}
    body, headers = _binary({"inputs": [short]}, data[:28])
    assert "input 'x' | has 28 bytes of data, expected 32 (8 FP32 elements for shape [1, 8])" in _error(
        _infer(client, body, headers=headers), 400)  # fmt: skip
    body, headers = _binary({"inputs": [tensor]}, data + b"extra")
    assert "has 5 binary bytes that no input's binary_data_size claims" in _error(
        _infer(client, body, headers=headers), 400)  # fmt: skip
    for length in ("10000", "zero", "-3", "1_0", "+10", "0x10", "1e1"):
        body, headers = _binary({"inputs": [tensor]}, data, length=0)
        headers["Inference-Header-Content-Length"] = length
        assert "header Inference-Header-Content-Length |" in _error(_infer(client, body, headers=headers), 400)
    body, headers = _binary({"inputs": [tensor]}, data, length=5)
    assert "request | is not valid JSON" in _error(_infer(client, body, headers=headers), 400)
    body, headers = _binary({"inputs": [tensor]}, data)
    assert _infer(client, body, headers=headers).status_code == 200


def test_unknown_models_versions_and_routes_are_404(client):
    assert "model 'nope' | is not served here; served models are 'mlp', 'embed'" in _error(
        _infer(client, {"inputs": [TENSOR]}, "nope"), 404)  # fmt: skip
    assert "model 'mlp' | has no version '7'; served version is '1'" in _error(
        client.post("/v2/models/mlp/versions/7/infer", json={"inputs": [TENSOR]}), 404)  # fmt: skip
    assert "model 'nope'" in _error(client.get("/v2/models/nope"), 404)
    assert "model 'nope'" in _error(client.get("/v2/models/nope/ready"), 404)
    assert "route '/v2/elsewhere' | is not a v2 route" in _error(client.get("/v2/elsewhere"), 404)
    assert "does not take GET" in _error(client.get("/v2/models/mlp/infer"), 405)


def test_an_oversized_body_is_refused_before_it_is_read(client):
    big = {"inputs": [{**TENSOR, "shape": [4096, 8], "data": [0.5] * (4096 * 8)}]}
    error = _error(_infer(client, big), 413)
    assert f"exceeds the server's limit of {LIMIT} bytes" in error and "--max-request-size" in error

    def chunks():  # no Content-Length: the limit holds while streaming
        yield b'{"inputs": ['
        for _ in range(200):
            yield b" " * 1024

    assert f"limit of {LIMIT} bytes" in _error(client.post("/v2/models/mlp/infer", content=chunks()), 413)
    # a control route's small JSON object has a limit of its own, which --max-request-size does not change
    padded = {"key": "/region", "byte_size": 64, "padding": " " * 100_000}
    for route in ("/v2/systemsharedmemory/region/r/register", "/v2/repository/index"):
        error = _error(client.post(route, json=padded), 413)
        assert "exceeds this route's limit of 65536 bytes" in error, error
        assert "this route takes a small JSON object (--max-request-size does not change its limit)" in error
    error = _error(client.post("/v2/repository/models/embed/unload", content=chunks()), 413)
    assert "exceeds this route's limit of 65536 bytes" in error


def test_the_server_still_answers_after_every_bad_request(client):
    response = _infer(client, {"inputs": [TENSOR]})
    assert response.status_code == 200 and response.json()["outputs"][0]["shape"] == [1, 4]
    assert client.get("/v2/health/ready").status_code == 200


@pytest.fixture(scope="module")
def grpc(server):
    return grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")


def _grpc_error(call) -> InferenceServerException:
    with pytest.raises(InferenceServerException) as caught:
        call()
    assert "Traceback" not in caught.value.message()
    return caught.value


def _tensor(name, shape, datatype, array):
    tensor = grpcclient.InferInput(name, shape, datatype)
    tensor.set_data_from_numpy(array)
    return tensor


def test_bad_grpc_requests_get_invalid_argument_or_not_found(grpc):
    x = np.ones((1, 8), np.float32)
    error = _grpc_error(lambda: grpc.infer("nope", [_tensor("x", [1, 8], "FP32", x)]))
    assert error.status() == "StatusCode.NOT_FOUND" and "model 'nope' | is not served here" in error.message()
    error = _grpc_error(lambda: grpc.infer("mlp", [_tensor("x", [1, 8], "FP32", x)], model_version="3"))
    assert error.status() == "StatusCode.NOT_FOUND" and "has no version '3'" in error.message()
    error = _grpc_error(lambda: grpc.get_model_metadata("nope"))
    assert error.status() == "StatusCode.NOT_FOUND"
    cases = [
        ([_tensor("x", [1, 8], "FP64", x.astype(np.float64))], "input 'x' | got datatype FP64, expected FP32"),
        ([_tensor("x", [1, 9], "FP32", np.ones((1, 9), np.float32))], "input 'x' | got shape [1, 9], expected [-1, 8]"),
        ([_tensor("w", [1, 8], "FP32", x)], "input 'w' | is not an input of model 'mlp'"),
        ([], "model 'mlp' | the request lacks input(s) 'x'"),
    ]
    for inputs, message in cases:
        error = _grpc_error(lambda inputs=inputs: grpc.infer("mlp", inputs))
        assert error.status() == "StatusCode.INVALID_ARGUMENT" and message in error.message(), error.message()
    wrong_length = _tensor("x", [1, 7], "FP32", np.ones((1, 7), np.float32))
    wrong_length.set_shape([1, 8])  # the client checks the data against the shape only when it is set
    error = _grpc_error(lambda: grpc.infer("mlp", [wrong_length]))
    assert "input 'x' | has 28 bytes of data, expected 32" in error.message()
    error = _grpc_error(lambda: grpc.infer("mlp", [_tensor("x", [4096, 8], "FP32", np.ones((4096, 8), np.float32))]))
    assert error.status() == "StatusCode.RESOURCE_EXHAUSTED"
    result = grpc.infer("mlp", [_tensor("x", [2, 8], "FP32", np.ones((2, 8), np.float32))])
    assert result.as_numpy("y").shape == (2, 4)


def test_a_tensor_sent_twice_and_request_text_with_controls_over_grpc(server, grpc):
    """Sweep 21c: typed contents beside raw_input_contents were dropped silently; a version with an
    escape sequence came back raw in the error details, which clients print to their terminal."""
    import grpc as grpclib
    from tritonclient.grpc import service_pb2, service_pb2_grpc

    stub = service_pb2_grpc.GRPCInferenceServiceStub(grpclib.insecure_channel(f"127.0.0.1:{server.grpc_port}"))
    request = service_pb2.ModelInferRequest(model_name="mlp")
    tensor = request.inputs.add(name="x", datatype="FP32", shape=[1, 8])
    tensor.contents.fp32_contents.extend([0.0] * 8)
    request.raw_input_contents.append(np.full((1, 8), 0.5, np.float32).tobytes())
    with pytest.raises(grpclib.RpcError) as twice:
        stub.ModelInfer(request)
    assert twice.value.code() == grpclib.StatusCode.INVALID_ARGUMENT
    assert "input 'x' | has both contents and raw_input_contents" in twice.value.details()
    x = np.ones((1, 8), np.float32)
    error = _grpc_error(lambda: grpc.infer("mlp", [_tensor("x", [1, 8], "FP32", x)], model_version="\x1b[31m1"))
    assert error.status() == "StatusCode.NOT_FOUND" and "\x1b" not in error.message() and "␛[31m1" in error.message()


def test_a_token_guards_every_route_on_both_protocols(catalog_paths):
    settings = ServerSettings(http_port=0, grpc_port=0, metrics_port=None, token="s3cret")
    with Server([ServedModel.from_path(catalog_paths["mlp_dynamic_batch"], name="mlp")], settings=settings) as server:
        assert server.wait_ready(30)
        base = f"http://127.0.0.1:{server.http_port}"
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret"}):
            response = httpx.post(f"{base}/v2/models/mlp/infer", json={"inputs": [TENSOR]}, headers=headers)
            assert response.status_code == 401 and "no valid bearer token" in response.json()["error"]
            assert httpx.get(f"{base}/v2/health/ready", headers=headers).status_code == 401
        good = {"Authorization": "Bearer s3cret"}
        assert httpx.post(f"{base}/v2/models/mlp/infer", json={"inputs": [TENSOR]}, headers=good).status_code == 200
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
        error = _grpc_error(lambda: client.is_server_ready())
        assert error.status() == "StatusCode.UNAUTHENTICATED"
        assert client.is_server_ready(headers={"authorization": "Bearer s3cret"})
        x = np.ones((1, 8), np.float32)
        result = client.infer("mlp", [_tensor("x", [1, 8], "FP32", x)], headers={"authorization": "Bearer s3cret"})
        assert result.as_numpy("y").shape == (1, 4)


def test_a_model_with_a_sequence_output_is_not_ready_and_says_why(catalog_paths, tmp_path):
    """Issue 21 sweep: metadata advertised a sequence output as FP32 and every infer was a 500 with a traceback."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("SequenceConstruct", ["x", "x"], ["s"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                              [helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, [1, 8])])  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(tmp_path / "seq.onnx"))
    served = [ServedModel.from_path(tmp_path / "seq.onnx", name="seq"),
              ServedModel.from_path(catalog_paths["mlp_dynamic_batch"], name="mlp")]  # fmt: skip
    settings = ServerSettings(http_port=0, grpc_port=None, metrics_port=None)
    with Server(served, BatchPolicy(), settings) as server:
        base = f"http://127.0.0.1:{server.http_port}"
        deadline = time.monotonic() + 30
        while httpx.get(f"{base}/v2/models/mlp/ready").status_code != 200 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert httpx.get(f"{base}/v2/models/seq/ready").status_code != 200
        response = httpx.post(f"{base}/v2/models/seq/infer", json={"inputs": [TENSOR]})
        assert response.status_code == 503
        assert "cannot carry: s (sequence)" in response.json()["error"]
        assert httpx.post(f"{base}/v2/models/mlp/infer", json={"inputs": [TENSOR]}).status_code == 200


def test_a_nan_output_is_not_sent_as_json_that_is_no_json(client):
    """Issue 21 sweep: a NaN in the data came back as a body with NaN in it, which JSON parsers refuse."""
    body = {"inputs": [{**TENSOR, "data": [float("nan")] + [0.5] * 7}]}
    response = client.post(
        "/v2/models/mlp/infer", content=json.dumps(body), headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 400
    error = response.json()["error"]  # a JSON body, parsed by a strict parser
    assert "output 'y' | holds NaN or infinity, which JSON cannot carry" in error and "binary_data" in error
    body["outputs"] = [{"name": "y", "parameters": {"binary_data": True}}]
    binary = client.post("/v2/models/mlp/infer", content=json.dumps(body), headers={"Content-Type": "application/json"})
    assert binary.status_code == 200
    length = int(binary.headers["Inference-Header-Content-Length"])
    assert np.isnan(np.frombuffer(binary.content[length:], np.float32)).any()
