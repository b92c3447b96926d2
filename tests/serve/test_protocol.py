"""tritonclient (HTTP and gRPC) against the server on loopback: readiness, metadata, and outputs equal to
``deploykit.load(...).run`` for JSON tensors, the binary tensor data extension and gRPC raw contents."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

import deploykit
from deploykit.serve import BatchPolicy, ServedModel, Server, ServerSettings
from deploykit.serve.protocol import v2_datatype
from tests.assets.paths import require_module

httpclient = require_module("tritonclient.http", "pip install 'tritonclient[http,grpc]'")
grpcclient = require_module("tritonclient.grpc", "pip install 'tritonclient[http,grpc]'")


@pytest.fixture(scope="module")
def server(mobilenet_v2, yolov4_tiny, catalog_paths) -> Iterator[Server]:
    models = [
        ServedModel.from_path(mobilenet_v2),
        ServedModel.from_path(yolov4_tiny, name="yolo"),
        ServedModel.from_path(catalog_paths["int64_embedding"]),
        ServedModel.from_path(catalog_paths["multi_io"]),
    ]
    with Server(models, BatchPolicy(max_batch=8), ServerSettings(http_port=0, grpc_port=0, metrics_port=0)) as running:
        assert running.wait_ready(60), [r.problem for r in running.repository.runners.values()]
        yield running


@pytest.fixture(scope="module")
def http(server) -> httpclient.InferenceServerClient:
    return httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")


@pytest.fixture(scope="module")
def grpc(server) -> grpcclient.InferenceServerClient:
    return grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")


def _reference(path, feeds):
    with deploykit.load(path) as session:
        return session.run(feeds)


def test_readiness_on_both_protocols(http, grpc):
    assert http.is_server_live() and http.is_server_ready()
    assert grpc.is_server_live() and grpc.is_server_ready()
    for name in ("mobilenet_v2", "yolo"):
        assert http.is_model_ready(name) and grpc.is_model_ready(name)
        assert http.is_model_ready(name, "1") and grpc.is_model_ready(name, "1")
    assert not http.is_model_ready("mobilenet_v2", "2")


def test_server_metadata(http, grpc):
    for metadata in (http.get_server_metadata(), grpc.get_server_metadata(as_json=True)):
        assert metadata["name"] == "deploykit" and metadata["version"] == deploykit.__version__
        assert "binary_tensor_data" in metadata["extensions"]


def test_model_metadata_says_datatypes_dynamic_axes_and_platform(http, grpc):
    for metadata in (http.get_model_metadata("mobilenet_v2"), grpc.get_model_metadata("mobilenet_v2", as_json=True)):
        assert metadata["name"] == "mobilenet_v2" and metadata["versions"] == ["1"]
        assert metadata["platform"] == "deploykit-onnxruntime"
        (tensor,) = metadata["inputs"]  # gRPC's JSON form writes int64 shapes as strings
        assert tensor["name"] == "images" and tensor["datatype"] == "FP32"
        assert [int(d) for d in tensor["shape"]] == [-1, 3, 224, 224]
        assert metadata["outputs"][0]["name"] == "output" and metadata["outputs"][0]["datatype"] == "FP32"
    yolo = http.get_model_metadata("yolo", "1")
    assert yolo["inputs"][0]["shape"] == [1, 3, 416, 416] and yolo["outputs"][0]["shape"] == [1, 2535, 85]
    assert yolo["parameters"]["precision"] == "f32" and yolo["parameters"]["dynamic_batching"] is False
    assert http.get_model_metadata("mobilenet_v2")["parameters"]["dynamic_batching"] is True
    assert http.get_model_metadata("int64_embedding")["inputs"][0]["datatype"] == "INT64"


def _http_infer(client, model, feeds, binary, version=""):
    inputs = []
    for name, array in feeds.items():
        tensor = httpclient.InferInput(name, list(array.shape), {"float32": "FP32", "int64": "INT64"}[array.dtype.name])
        tensor.set_data_from_numpy(array, binary_data=binary)
        inputs.append(tensor)
    return client.infer(model, inputs, model_version=version)


def _grpc_infer(client, model, feeds):
    inputs = []
    for name, array in feeds.items():
        tensor = grpcclient.InferInput(name, list(array.shape), {"float32": "FP32", "int64": "INT64"}[array.dtype.name])
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    return client.infer(model, inputs)


@pytest.mark.parametrize("model", ["mobilenet_v2", "yolo"])
def test_outputs_equal_the_in_process_session_on_every_transport(server, http, grpc, model):
    runner = server.repository.runner(model)
    spec = runner.inputs["images"]
    x = np.random.default_rng(0).random((1, *spec.shape[1:]), dtype=np.float32)
    expected = _reference(runner.model.path, {"images": x})
    name = next(iter(expected))
    answers = {
        "http-binary": _http_infer(http, model, {"images": x}, True).as_numpy(name),
        "http-json": _http_infer(http, model, {"images": x}, False, version="1").as_numpy(name),
        "grpc": _grpc_infer(grpc, model, {"images": x}).as_numpy(name),
    }
    for transport, got in answers.items():
        assert got.dtype == np.float32 and got.shape == expected[name].shape, transport
        np.testing.assert_array_equal(got, expected[name], err_msg=transport)


def test_int64_inputs_and_several_outputs_in_graph_order(server, http, grpc):
    indices = np.array([[3, 1, 4, 1, 5]], dtype=np.int64)
    expected = _reference(server.repository.runner("int64_embedding").model.path, {"indices": indices})
    for result in (_http_infer(http, "int64_embedding", {"indices": indices}, False),
                   _grpc_infer(grpc, "int64_embedding", {"indices": indices})):  # fmt: skip
        np.testing.assert_array_equal(result.as_numpy("embedded"), expected["embedded"])
    rng = np.random.default_rng(1)
    feeds = {"a": rng.random((2, 3), dtype=np.float32), "b": rng.random((2, 3), dtype=np.float32)}
    expected = _reference(server.repository.runner("multi_io").model.path, feeds)
    result = _http_infer(http, "multi_io", feeds, True)
    assert [o["name"] for o in result.get_response()["outputs"]] == ["z_sum", "a_prod", "m_diff"]
    for name, array in expected.items():
        np.testing.assert_array_equal(result.as_numpy(name), array)
        np.testing.assert_array_equal(_grpc_infer(grpc, "multi_io", feeds).as_numpy(name), array)


def test_only_the_outputs_asked_for_come_back(http):
    rng = np.random.default_rng(2)
    feeds = {"a": rng.random((2, 3), dtype=np.float32), "b": rng.random((2, 3), dtype=np.float32)}
    inputs = []
    for name, array in feeds.items():
        tensor = httpclient.InferInput(name, [2, 3], "FP32")
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    result = http.infer("multi_io", inputs, outputs=[httpclient.InferRequestedOutput("m_diff", binary_data=False)],
                        request_id="r-7")  # fmt: skip
    response = result.get_response()
    assert [o["name"] for o in response["outputs"]] == ["m_diff"] and response["id"] == "r-7"
    np.testing.assert_array_equal(result.as_numpy("m_diff"), feeds["a"] - feeds["b"])


def test_grpc_typed_contents_are_read_as_well_as_raw_ones(server):
    """tritonclient sends raw_input_contents; other clients send typed contents (fp32_contents ...)."""
    import grpc as grpc_library
    from tritonclient.grpc import service_pb2, service_pb2_grpc

    indices = np.array([[3, 1, 4, 1, 5]], dtype=np.int64)
    expected = _reference(server.repository.runner("int64_embedding").model.path, {"indices": indices})
    with grpc_library.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        request = service_pb2.ModelInferRequest(model_name="int64_embedding")
        tensor = request.inputs.add(name="indices", datatype="INT64", shape=[1, 5])
        tensor.contents.int64_contents.extend(indices.ravel().tolist())
        response = stub.ModelInfer(request)
        (output,) = response.outputs
        assert output.name == "embedded" and output.datatype == "FP32" and list(output.shape) == [1, 5, 4]
        got = np.frombuffer(response.raw_output_contents[0], np.float32).reshape(1, 5, 4)
        np.testing.assert_array_equal(got, expected["embedded"])
        request.inputs[0].contents.int64_contents[:] = [1, 2, 3]
        with pytest.raises(grpc_library.RpcError) as caught:
            stub.ModelInfer(request)
        assert caught.value.code() == grpc_library.StatusCode.INVALID_ARGUMENT
        assert "input 'indices' | has 3 data elements, expected 5 for shape [1, 5]" in caught.value.details()
        unimplemented = service_pb2.CudaSharedMemoryStatusRequest()
        with pytest.raises(grpc_library.RpcError) as caught:
            stub.CudaSharedMemoryStatus(unimplemented)
        assert caught.value.code() == grpc_library.StatusCode.UNIMPLEMENTED


@pytest.mark.parametrize(
    ("dtype", "expected"),
    [
        (np.dtype("float32"), "FP32"),
        (np.dtype(">f4"), "FP32"),  # byte-swapped: no entry of its own, found by name
        (np.float32, "FP32"),  # a scalar type, not a dtype
        ("int64", "INT64"),
        (np.dtype("uint16"), "UINT16"),
        (np.dtype("bool"), "BOOL"),
        (np.dtype("float16"), "FP16"),
        (np.dtype("O"), "BYTES"),
        (np.dtype("U5"), "BYTES"),
        (np.dtype("complex64"), "BYTES"),
    ],
)
def test_every_spelling_of_a_dtype_gets_the_protocols_datatype(dtype, expected):
    assert v2_datatype(dtype) == expected


def test_bfloat16_is_bf16():
    ml_dtypes = require_module("ml_dtypes", "pip install ml_dtypes")
    assert v2_datatype(np.dtype(ml_dtypes.bfloat16)) == "BF16"
