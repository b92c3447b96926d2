"""The system shared-memory extension with tritonclient's own shared-memory helpers, over HTTP and gRPC:
tensors read from and written to regions the client registered, equal to the in-process session (and,
for ``multi_io``, to numpy's own a+b, a*b, a-b); every misuse a protocol error naming what was wrong."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import numpy as np
import pytest

import deploykit
from deploykit.serve import BatchPolicy, ServedModel, Server, ServerSettings
from tests.assets.paths import require_module

httpclient = require_module("tritonclient.http", "pip install 'tritonclient[http,grpc]'")
grpcclient = require_module("tritonclient.grpc", "pip install 'tritonclient[http,grpc]'")
shm = require_module("tritonclient.utils.shared_memory", "pip install 'tritonclient[http,grpc]'")
from tritonclient.utils import InferenceServerException  # noqa: E402

pytestmark = pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="POSIX shared memory lives in /dev/shm (Linux)")


@pytest.fixture(scope="module")
def server(yolov4_tiny, catalog_paths) -> Iterator[Server]:
    models = [ServedModel.from_path(yolov4_tiny, name="yolo"), ServedModel.from_path(catalog_paths["multi_io"])]
    with Server(models, BatchPolicy(max_batch=1), ServerSettings(http_port=0, grpc_port=0, metrics_port=0)) as running:
        assert running.wait_ready(60), [r.problem for r in running.repository.runners.values()]
        yield running


@pytest.fixture(scope="module")
def clients(server):
    return {
        "http": httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}"),
        "grpc": grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}"),
    }


@pytest.fixture
def region():
    """Make shared-memory regions (tritonclient's helpers: shm_open under /dev/shm); destroyed after."""
    handles = []

    def make(byte_size: int):
        name = f"dk-{uuid.uuid4().hex[:12]}"
        handle = shm.create_shared_memory_region(name, f"/{name}", byte_size)
        handles.append(handle)
        return name, f"/{name}", handle

    yield make
    for handle in handles:
        shm.destroy_shared_memory_region(handle)


def _module(protocol):
    return httpclient if protocol == "http" else grpcclient


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_yolo_input_and_output_in_shared_memory_equal_the_in_process_session(server, clients, region, protocol):
    client, module = clients[protocol], _module(protocol)
    x = np.random.default_rng(1).random((1, 3, 416, 416), dtype=np.float32)
    with deploykit.load(server.repository.runner("yolo").model.path) as session:
        expected = session.run({"images": x})
    ((out_name, out_value),) = expected.items()
    in_region, in_key, in_handle = region(x.nbytes)
    out_region, out_key, out_handle = region(out_value.nbytes + 64)  # larger than needed: allowed
    shm.set_shared_memory_region(in_handle, [x])
    client.register_system_shared_memory(in_region, in_key, x.nbytes)
    client.register_system_shared_memory(out_region, out_key, out_value.nbytes + 64)
    try:
        status = client.get_system_shared_memory_status(**({"as_json": True} if protocol == "grpc" else {}))
        listed = status if protocol == "http" else list(status["regions"].values())
        assert {r["name"] for r in listed} == {in_region, out_region}
        tensor = module.InferInput("images", [1, 3, 416, 416], "FP32")
        tensor.set_shared_memory(in_region, x.nbytes)
        output = module.InferRequestedOutput(out_name)
        output.set_shared_memory(out_region, out_value.nbytes + 64)
        result = client.infer("yolo", [tensor], outputs=[output])
        described = result.get_output(out_name)  # a dict over HTTP, the protobuf message over gRPC
        shape = described["shape"] if protocol == "http" else described.shape
        assert [int(d) for d in shape] == list(out_value.shape)
        if protocol == "http":  # the bytes are in the region, not in the answer
            assert "data" not in described and "binary_data_size" not in described["parameters"]
            assert described["parameters"]["shared_memory_byte_size"] == out_value.nbytes
        else:
            assert described.parameters["shared_memory_byte_size"].int64_param == out_value.nbytes
            assert result.get_response().raw_output_contents[0] == b""
        got = shm.get_contents_as_numpy(out_handle, np.float32, list(out_value.shape))
        np.testing.assert_array_equal(got, out_value)
    finally:
        client.unregister_system_shared_memory()
    status = client.get_system_shared_memory_status(**({"as_json": True} if protocol == "grpc" else {}))
    assert (status if protocol == "http" else status.get("regions", {})) in ([], {})


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_one_input_in_shared_memory_and_one_in_the_request(clients, region, protocol):
    """gRPC's raw contents then hold only the input that is not in a region (tritonclient's layout)."""
    client, module = clients[protocol], _module(protocol)
    rng = np.random.default_rng(2)
    a, b = rng.random((2, 3), dtype=np.float32), rng.random((2, 3), dtype=np.float32)
    name, key, handle = region(a.nbytes)
    shm.set_shared_memory_region(handle, [a])
    client.register_system_shared_memory(name, key, a.nbytes)
    try:
        first = module.InferInput("a", [2, 3], "FP32")
        first.set_shared_memory(name, a.nbytes)
        second = module.InferInput("b", [2, 3], "FP32")
        second.set_data_from_numpy(b)
        result = client.infer("multi_io", [first, second])
        np.testing.assert_array_equal(result.as_numpy("z_sum"), a + b)
        np.testing.assert_array_equal(result.as_numpy("a_prod"), a * b)
        np.testing.assert_array_equal(result.as_numpy("m_diff"), a - b)
    finally:
        client.unregister_system_shared_memory(name)


def _refused(call, status: str = "") -> str:
    """The server's message for a refused call; ``status`` (400, INVALID_ARGUMENT ...) checked when given."""
    with pytest.raises(InferenceServerException) as caught:
        call()
    assert status in str(caught.value.status()), (caught.value.status(), str(caught.value))
    return str(caught.value)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_misuse_is_a_protocol_error_that_names_the_problem(clients, region, protocol, tmp_path):
    client, module = clients[protocol], _module(protocol)
    bad = "400" if protocol == "http" else "INVALID_ARGUMENT"
    missing = f"/dk-missing-{uuid.uuid4().hex[:8]}"
    message = _refused(lambda: client.register_system_shared_memory("r0", missing, 16), bad)
    assert "opens no shared-memory object" in message and missing in message
    name, key, _handle = region(96)
    message = _refused(lambda: client.register_system_shared_memory(name, key, 64, offset=64), bad)
    assert "runs past the end" in message and "96 bytes" in message
    message = _refused(lambda: client.register_system_shared_memory("r1", "/../etc/passwd", 16), bad)
    assert "is not a shared-memory key" in message
    client.register_system_shared_memory(name, key, 96)
    try:
        message = _refused(lambda: client.register_system_shared_memory(name, key, 96), bad)
        assert "already registered" in message

        def infer(in_region, in_size, out_size=None, model="multi_io"):
            a = module.InferInput("a", [2, 3], "FP32")
            a.set_shared_memory(in_region, in_size)
            b = module.InferInput("b", [2, 3], "FP32")
            b.set_data_from_numpy(np.ones((2, 3), np.float32))
            outputs = None
            if out_size is not None:
                outputs = [module.InferRequestedOutput("z_sum")]
                outputs[0].set_shared_memory(name, out_size)
            return client.infer(model, [a, b], outputs=outputs)

        message = _refused(lambda: infer("nowhere", 24), bad)
        assert "'nowhere' | is not a registered shared-memory region" in message and name in message
        message = _refused(lambda: infer(name, 20), bad)
        assert "input 'a'" in message and "has 20 bytes of data, expected 24" in message
        message = _refused(lambda: infer(name, 128), bad)
        assert "asks for 128 bytes at offset 0" in message and "holds 96 bytes" in message
        message = _refused(lambda: infer(name, 24, out_size=8), bad)
        assert "output 'z_sum' | needs 24 bytes" in message and "shared_memory_byte_size is 8" in message
    finally:
        client.unregister_system_shared_memory(name)
    message = _refused(lambda: client.unregister_system_shared_memory(name), bad)
    assert f"'{name}' | is not a registered shared-memory region" in message


def test_a_symlink_or_a_folder_under_dev_shm_is_not_a_region(clients):
    client = clients["http"]
    target = f"dk-target-{uuid.uuid4().hex[:8]}"
    link = f"dk-link-{uuid.uuid4().hex[:8]}"
    folder = f"dk-folder-{uuid.uuid4().hex[:8]}"
    os.symlink(f"/dev/shm/{target}", f"/dev/shm/{link}")
    os.mkdir(f"/dev/shm/{folder}")
    try:
        with open(f"/dev/shm/{target}", "wb") as handle:
            handle.write(b"\0" * 64)
        assert "opens no shared-memory object" in _refused(lambda: client.register_system_shared_memory("l", link, 8))
        message = _refused(lambda: client.register_system_shared_memory("f", folder, 8))
        assert "opens no shared-memory object" in message or "is not a shared-memory object" in message
    finally:
        for path in (link, target):
            os.unlink(f"/dev/shm/{path}")
        os.rmdir(f"/dev/shm/{folder}")


def test_a_server_other_machines_reach_offers_no_shared_memory(catalog_paths):
    settings = ServerSettings(host="0.0.0.0", allow_remote=True, http_port=0, grpc_port=None, metrics_port=None)
    with Server([ServedModel.from_path(catalog_paths["multi_io"])], settings=settings) as running:
        assert running.wait_ready(60)
        client = httpclient.InferenceServerClient(f"127.0.0.1:{running.http_port}")
        assert "system_shared_memory" not in client.get_server_metadata()["extensions"]
        message = _refused(lambda: client.register_system_shared_memory("r", "/anything", 8))
        assert "is not offered by this server" in message and "0.0.0.0" in message


def test_an_object_truncated_after_registering_is_refused_before_it_is_read(clients):
    """Reading a mapping past the end of its shrunk file would end the server with SIGBUS."""
    client = clients["http"]
    key = f"dk-shrink-{uuid.uuid4().hex[:8]}"
    with open(f"/dev/shm/{key}", "wb") as handle:
        handle.write(b"\0" * 3 * 4096)
    try:
        client.register_system_shared_memory(key, f"/{key}", 3 * 4096)
        os.truncate(f"/dev/shm/{key}", 0)
        a = httpclient.InferInput("a", [2, 3], "FP32")
        a.set_shared_memory(key, 24, offset=2 * 4096)
        b = httpclient.InferInput("b", [2, 3], "FP32")
        b.set_data_from_numpy(np.ones((2, 3), np.float32))
        message = _refused(lambda: client.infer("multi_io", [a, b]), "400")
        assert f"its object '/{key}' now holds 0 bytes, fewer than the {3 * 4096} registered" in message
        assert client.is_server_live() and client.is_model_ready("multi_io")
    finally:
        client.unregister_system_shared_memory()
        os.unlink(f"/dev/shm/{key}")


def test_the_command_keeps_large_buffers_on_glibc_and_says_so(command, catalog_paths):
    """``deploykit serve`` asks glibc to keep freed buffers (benchmarks/serve.py measures why); elsewhere it
    says it changed nothing; ``--no-reuse-large-buffers`` leaves malloc alone."""
    import platform

    on = command(str(catalog_paths["multi_io"]), "--grpc-port", "none", "--metrics-port", "none", endpoints=("http",))
    line = on.read_until(r"^serve: large buffers:", 10)
    glibc = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"
    assert ("large buffers: reused (glibc mmap threshold 32 MiB" in line) == glibc, line
    off = command(
        str(catalog_paths["multi_io"]),
        "--no-reuse-large-buffers",
        "--grpc-port",
        "none",
        "--metrics-port",
        "none",
        endpoints=("http",),
    )
    off.process.terminate()
    code, text = off.finish(30)
    assert code == 143 and "ready:" in text and "large buffers" not in text, text


def test_grpc_bytes_that_are_no_message_and_a_raw_count_that_does_not_match(server):
    """ModelInfer's own reading of the wire (raw contents as views): what protobuf would refuse is refused."""
    import grpc
    from tritonclient.grpc import service_pb2

    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
        call = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")  # bytes in, bytes out
        for broken in (b"\xff" * 20, b"\x0a\x05m", b"\x0f"):
            with pytest.raises(grpc.RpcError) as caught:
                call(broken, timeout=10)
            assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "request | is not a ModelInferRequest message" in caught.value.details()
        request = service_pb2.ModelInferRequest(model_name="multi_io")
        for name in ("a", "b"):
            request.inputs.add(name=name, datatype="FP32", shape=[2, 3])
        request.raw_input_contents.append(np.ones(6, np.float32).tobytes())
        with pytest.raises(grpc.RpcError) as caught:
            call(request.SerializeToString(), timeout=10)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "has 1 raw_input_contents for 2 inputs." in caught.value.details()
        a, b = np.full(6, 3, np.float32), np.full(6, 2, np.float32)
        request.raw_input_contents[:] = [a.tobytes(), b.tobytes()]
        reply = service_pb2.ModelInferResponse.FromString(call(request.SerializeToString(), timeout=10))
        got = dict(zip([o.name for o in reply.outputs], reply.raw_output_contents, strict=True))
        np.testing.assert_array_equal(np.frombuffer(got["m_diff"], np.float32), a - b)
        np.testing.assert_array_equal(np.frombuffer(got["z_sum"], np.float32), a + b)
