"""Triton's model-configuration extension as tritonclient reads it (HTTP and gRPC): inputs, outputs,
``max_batch_size``, dynamic batching and instance groups checked against a session opened
independently with ``deploykit.load``, the backend named as deploykit's, and unknown models refused."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import deploykit
from deploykit.serve import BatchPolicy, ServedModel, Server, ServerSettings
from deploykit.serve.model_config import instance_kind
from tests.assets.paths import require_module

httpclient = require_module("tritonclient.http", "pip install 'tritonclient[http,grpc]'")
grpcclient = require_module("tritonclient.grpc", "pip install 'tritonclient[http,grpc]'")
from tritonclient.utils import InferenceServerException  # noqa: E402

POLICY = BatchPolicy(max_batch=6, max_queue_delay_ms=1.5)
TYPES = {"float32": "TYPE_FP32", "int64": "TYPE_INT64"}


@pytest.fixture(scope="module")
def server(catalog_paths) -> Iterator[Server]:
    models = [
        ServedModel.from_path(catalog_paths["mlp_dynamic_batch"], name="mlp", instances=2),
        ServedModel.from_path(catalog_paths["multi_io"]),
        ServedModel.from_path(catalog_paths["int64_embedding"]),
        ServedModel.from_path(catalog_paths["symbolic_sequence"]),
    ]
    with Server(models, POLICY, ServerSettings(http_port=0, grpc_port=0, metrics_port=None)) as running:
        assert running.wait_ready(60), running.problems()
        yield running


@pytest.fixture(scope="module")
def clients(server) -> tuple[object, object]:
    return (httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}"),
            grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}"))  # fmt: skip


def _configs(clients, model: str, version: str = "") -> list[dict]:
    """The configuration from both transports, in one form (gRPC's JSON writes int64 as strings)."""
    http, grpc = clients
    from_grpc = grpc.get_model_config(model, version, as_json=True)["config"]
    for tensor in [*from_grpc.get("input", []), *from_grpc.get("output", [])]:
        tensor["dims"] = [int(d) for d in tensor["dims"]]
    if "dynamic_batching" in from_grpc:
        delay = from_grpc["dynamic_batching"]["max_queue_delay_microseconds"]
        from_grpc["dynamic_batching"]["max_queue_delay_microseconds"] = int(delay)
    return [http.get_model_config(model, version), from_grpc]


def _expected_tensors(session, batched: bool) -> tuple[list[dict], list[dict]]:
    def one(spec) -> dict:
        shape = [d if isinstance(d, int) else -1 for d in spec.shape]
        return {"name": spec.name, "data_type": TYPES[spec.dtype.name], "dims": shape[1:] if batched else shape}

    return [one(s) for s in session.inputs.values()], [one(s) for s in session.outputs.values()]


@pytest.mark.parametrize(
    ("model", "batched"),
    [("mlp", True), ("multi_io", False), ("int64_embedding", False), ("symbolic_sequence", False)],
)
def test_the_configuration_describes_the_session_that_runs(server, clients, model, batched):
    runner = server.repository.runner(model)
    with deploykit.load(runner.model.path) as session:  # an independent session of the same file
        inputs, outputs = _expected_tensors(session, batched)
        info = session.info
    kind, gpus = instance_kind(info.device)
    for config in _configs(clients, model):
        assert config["name"] == model
        assert config["platform"] == f"deploykit-{info.backend}" and config["backend"] == info.backend
        assert config["input"] == inputs and config["output"] == outputs
        assert config["instance_group"] == [{"name": model, "kind": kind, "count": runner.model.instances,
                                             **({"gpus": gpus} if gpus else {})}]  # fmt: skip
        parameters = {k: v["string_value"] for k, v in config["parameters"].items()}
        assert parameters["device"] == info.device and parameters["precision"] == info.precision
        if batched:  # the batch axis is left out of dims, and the batch bound and delay are the policy's
            assert config["max_batch_size"] == POLICY.max_batch
            assert config["dynamic_batching"] == {"max_queue_delay_microseconds": 1500}
        else:
            assert config.get("max_batch_size", 0) == 0 and "dynamic_batching" not in config


def test_the_batch_axis_is_left_out_only_where_the_model_batches(clients):
    http, _ = clients
    assert http.get_model_config("mlp")["input"][0]["dims"] == [8]  # (batch, 8)
    assert http.get_model_config("symbolic_sequence")["input"][0]["dims"] == [1, -1, 4]  # (1, seq, 4)


def test_a_version_is_accepted_and_unknown_models_and_versions_are_not_found(clients):
    http, grpc = clients
    assert http.get_model_config("mlp", "1")["name"] == "mlp"
    for model, version, message in [
        ("nosuch", "", "model 'nosuch' | is not served here; served models are 'mlp', 'multi_io'"),
        ("mlp", "7", "model 'mlp' | has no version '7'; served version is '1'."),
    ]:
        with pytest.raises(InferenceServerException) as http_error:
            http.get_model_config(model, version)
        assert http_error.value.status() == "404" and message in http_error.value.message()
        with pytest.raises(InferenceServerException) as grpc_error:
            grpc.get_model_config(model, version)
        assert grpc_error.value.status() == "StatusCode.NOT_FOUND" and message in grpc_error.value.message()


@pytest.mark.parametrize(
    ("device", "kind", "gpus"),
    [("cpu", "KIND_CPU", []), ("CPU", "KIND_CPU", []), ("cuda:1", "KIND_GPU", [1]), ("cuda", "KIND_GPU", [0]),
     ("GPU.0", "KIND_GPU", [0]), ("NPU", "KIND_MODEL", []), ("AUTO", "KIND_MODEL", [])],
)  # fmt: skip
def test_the_instance_kind_follows_the_device(device, kind, gpus):
    assert instance_kind(device) == (kind, gpus)


def test_without_batching_the_whole_shape_is_given_and_max_batch_size_is_0(catalog_paths):
    """``--max-batch 1`` turns batching off: the dynamic axis 0 is then a dim like any other."""
    model = ServedModel.from_path(catalog_paths["mlp_dynamic_batch"], name="mlp")
    settings = ServerSettings(http_port=0, grpc_port=None, metrics_port=None)
    with Server([model], BatchPolicy(max_batch=1), settings) as server:
        assert server.wait_ready(60), server.problems()
        config = httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}").get_model_config("mlp")
    assert config["max_batch_size"] == 0 and "dynamic_batching" not in config
    assert config["input"] == [{"name": "x", "data_type": "TYPE_FP32", "dims": [-1, 8]}]
    assert config["output"] == [{"name": "y", "data_type": "TYPE_FP32", "dims": [-1, 4]}]
