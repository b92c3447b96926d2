"""The repository extension as tritonclient calls it (HTTP and gRPC) against ``deploykit serve``: the
index of the served folder, load and unload around ``is_model_ready``, every refused load with its
status and message, an unload with requests in flight, and loads and unloads of one model at once."""

from __future__ import annotations

import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import pytest

from deploykit.optimize.bundle import MANIFEST
from tests.assets.paths import require_module

httpclient = require_module("tritonclient.http", "pip install 'tritonclient[http,grpc]'")
grpcclient = require_module("tritonclient.grpc", "pip install 'tritonclient[http,grpc]'")
from tritonclient.utils import InferenceServerException  # noqa: E402


@pytest.fixture
def folder(tmp_path, catalog_paths) -> Path:
    """A served folder: the served model, two loadable ones, a file that is not ONNX, a bundle folder
    whose manifest is not JSON, and a link to a model outside the folder."""
    models = tmp_path / "models"
    models.mkdir()
    shutil.copy(catalog_paths["mlp_dynamic_batch"], models / "mlp.onnx")
    shutil.copy(catalog_paths["multi_io"], models / "multi_io.onnx")
    shutil.copy(catalog_paths["int64_embedding"], models / "embed.onnx")
    (models / "broken.onnx").write_bytes(b"these bytes are not an ONNX model")
    (models / "badbundle").mkdir()
    (models / "badbundle" / MANIFEST).write_text("{")
    (tmp_path / "elsewhere").mkdir()
    shutil.copy(catalog_paths["mlp_dynamic_batch"], tmp_path / "elsewhere" / "outside.onnx")
    (models / "escape.onnx").symlink_to(tmp_path / "elsewhere" / "outside.onnx")
    return models


@pytest.fixture
def server(command, folder):
    """``deploykit serve`` of one model of the folder on the slow test backend (each run takes
    ``plugins.SLOW_RUN_S``), so that requests can be in flight when a model is unloaded."""
    return command(str(folder / "mlp.onnx"), "-b", "slow", "--max-batch", "1", "--max-queue-delay", "0",
                   "--shutdown-timeout", "30")  # fmt: skip


def _clients(server):
    return (httpclient.InferenceServerClient(f"127.0.0.1:{server.http}", network_timeout=120),
            grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc}"))  # fmt: skip


def _in_own_client(server, action, transport=0):
    """``action`` with a client of this thread's own (``transport`` 0: HTTP, 1: gRPC), closed here:
    tritonclient's HTTP client serves one thread, and its gevent pool cannot be joined from another
    thread's garbage collection."""
    clients = _clients(server)
    try:
        return action(clients[transport])
    finally:
        for client in clients:
            client.close()


def _infer_multi_io(client):
    module = httpclient if isinstance(client, httpclient.InferenceServerClient) else grpcclient
    inputs = []
    for name in ("a", "b"):
        tensor = module.InferInput(name, [2, 3], "FP32")
        tensor.set_data_from_numpy(np.full((2, 3), 2.0, np.float32))
        inputs.append(tensor)
    return client.infer("multi_io", inputs).as_numpy("z_sum")


def _index(client) -> dict[str, tuple[str, str]]:
    if isinstance(client, httpclient.InferenceServerClient):
        entries = client.get_model_repository_index()
    else:
        entries = client.get_model_repository_index(as_json=True)["models"]
    return {e["name"]: (e.get("state", ""), e.get("reason", "")) for e in entries}


def _refused(call, status: str, message: str) -> None:
    with pytest.raises(InferenceServerException) as caught:
        call()
    assert caught.value.status() == status, caught.value.message()
    assert message in caught.value.message(), caught.value.message()
    assert "Traceback" not in caught.value.message()


def test_load_and_unload_around_readiness_on_both_transports(server):
    http, grpc = _clients(server)
    for client in (http, grpc):
        index = _index(client)
        assert index["mlp"] == ("READY", "")
        for name in ("multi_io", "embed", "broken", "badbundle", "escape"):
            assert index[name] == ("UNAVAILABLE", "not loaded"), name
        assert "outside" not in index
    assert [e["name"] for e in http.get_model_repository_index(query_params={})] == sorted(_index(http))
    assert [e["name"] for e in httpx.post(f"http://127.0.0.1:{server.http}/v2/repository/index",
                                          json={"ready": True}, timeout=30).json()] == ["mlp"]  # fmt: skip
    assert not http.is_model_ready("multi_io")  # not loaded: 404, which tritonclient's HTTP reads as not ready
    _refused(lambda: grpc.is_model_ready("multi_io"), "StatusCode.NOT_FOUND", "model 'multi_io' | is not served")

    http.load_model("multi_io")
    assert http.is_model_ready("multi_io") and grpc.is_model_ready("multi_io")
    np.testing.assert_array_equal(_infer_multi_io(grpc), np.full((2, 3), 4.0, np.float32))
    assert http.get_model_config("multi_io")["input"][0]["dims"] == [2, 3]
    assert _index(grpc)["multi_io"] == ("READY", "")

    grpc.unload_model("multi_io")
    assert not http.is_model_ready("multi_io") and not grpc.is_model_ready("multi_io")
    assert _index(http)["multi_io"] == ("UNAVAILABLE", "unloaded")
    unloaded = "model 'multi_io' | it was unloaded (POST /v2/repository/models/multi_io/load loads it again)."
    _refused(lambda: _infer_multi_io(http), "503", unloaded)
    _refused(lambda: _infer_multi_io(grpc), "StatusCode.UNAVAILABLE", unloaded)
    assert http.is_server_ready()  # an unloaded model does not make the server unready

    grpc.load_model("multi_io")
    np.testing.assert_array_equal(_infer_multi_io(http), np.full((2, 3), 4.0, np.float32))
    http.load_model("mlp")  # already loaded: nothing changes, nothing is opened again
    grpc.load_model("mlp")
    assert http.is_model_ready("mlp")
    http.unload_model("embed")  # in the folder but not loaded: nothing to do
    assert _index(http)["embed"] == ("UNAVAILABLE", "not loaded")
    grpc.load_model("embed")
    server.read_until(r"model 'embed' ready on", 60)  # the log is read past anything the loads of mlp wrote
    assert sum(1 for line in server.lines if "model 'mlp' ready on" in line) == 1


def test_every_refused_load_says_why_and_the_server_keeps_serving(server, folder):
    http, grpc = _clients(server)
    cases = [
        ("broken", "400", "INVALID_ARGUMENT",
         f"model 'broken' | fails its checks: model '{folder / 'broken.onnx'}' | cannot be parsed as ONNX"),
        ("badbundle", "400", "INVALID_ARGUMENT", "model 'badbundle' | fails its checks: bundle"),
        ("escape", "400", "INVALID_ARGUMENT",
         f"model 'escape' | {folder / 'escape.onnx'} leads to {(folder / 'escape.onnx').resolve()}, outside the "
         f"served folders ({folder}); a model is loaded only from them."),
        ("nosuch", "404", "NOT_FOUND", f"model 'nosuch' | is neither served nor in the served folders ({folder})"),
    ]  # fmt: skip
    for name, http_status, grpc_status, message in cases:
        _refused(lambda name=name: http.load_model(name), http_status, message)
        _refused(lambda name=name: grpc.load_model(name), f"StatusCode.{grpc_status}", message)
    assert _index(http)["broken"][1].startswith(f"model '{folder / 'broken.onnx'}' | cannot be parsed as ONNX")
    path = "load of model '../elsewhere/outside' | is not a model name; models are loaded by name from the served"
    _refused(lambda: grpc.load_model("../elsewhere/outside"), "StatusCode.INVALID_ARGUMENT", path)
    _refused(lambda: grpc.unload_model("nosuch"), "StatusCode.NOT_FOUND", "model 'nosuch' | is neither served")
    _refused(lambda: http.unload_model("nosuch"), "404", "model 'nosuch' | is neither served")
    override = "load of model 'multi_io' | takes no configuration override or model files ('config')"
    _refused(lambda: http.load_model("multi_io", config='{"max_batch_size": 4}'), "400", override)
    _refused(lambda: grpc.load_model("multi_io", config="{}"), "StatusCode.UNIMPLEMENTED", override)
    base = f"http://127.0.0.1:{server.http}/v2/repository"
    answer = httpx.post(f"{base}/models/multi_io/load", content=b"{", timeout=30)
    assert answer.status_code == 400 and answer.json()["error"].startswith("load request | is not valid JSON")
    for parameters, kind in (([], "list"), (0, "int"), (False, "bool"), ("", "str"), ([1], "list")):
        for action in ("load", "unload"):
            answer = httpx.post(f"{base}/models/multi_io/{action}", json={"parameters": parameters}, timeout=30)
            assert answer.status_code == 400, (parameters, answer.text)
            assert answer.json()["error"].startswith(f"repository request | 'parameters' is {kind}, expected an obj")
    assert httpx.post(f"{base}/models/multi_io/unload", json={"parameters": None}, timeout=30).status_code == 200
    answer = httpx.post(f"{base}/index", json={"ready": "yes"}, timeout=30)
    assert answer.status_code == 400
    assert answer.json()["error"].startswith("index request | 'ready' is 'yes', expected true or false. Hint:")
    assert http.is_server_ready() and http.is_model_ready("mlp") and not http.is_model_ready("broken")


def _in_server(server, model: str) -> int:
    """Requests of ``model`` queued or running (the model's metadata says both)."""
    parameters = httpx.get(f"http://127.0.0.1:{server.http}/v2/models/{model}", timeout=30).json()["parameters"]
    return int(parameters["queued"]) + int(parameters["running"])


def _wait_for(condition, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "the server did not get there in time"
        time.sleep(0.02)


def test_an_unload_lets_requests_in_flight_finish_and_refuses_new_ones(server):
    http, grpc = _clients(server)
    http.load_model("multi_io")
    with ThreadPoolExecutor(4) as pool:
        in_flight = [pool.submit(_infer_multi_io, grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc}"))
                     for _ in range(3)]  # fmt: skip
        _wait_for(lambda: _in_server(server, "multi_io") == 3)  # all three taken: one runs, two wait
        unloading = pool.submit(_in_own_client, server, lambda http_client: http_client.unload_model("multi_io"))
        _wait_for(lambda: _index(http)["multi_io"][0] == "UNLOADING")
        _refused(lambda: _infer_multi_io(http), "503", "model 'multi_io' | it was unloaded")
        _refused(lambda: _infer_multi_io(grpc), "StatusCode.UNAVAILABLE", "model 'multi_io' | it was unloaded")
        unloading.result(timeout=60)  # it returns once the session has run all three (SLOW_RUN_S each)
        assert _in_server(server, "multi_io") == 0
        for future in in_flight:
            np.testing.assert_array_equal(future.result(timeout=60), np.full((2, 3), 4.0, np.float32))
    assert _index(http)["multi_io"] == ("UNAVAILABLE", "unloaded")


def test_an_unload_lets_a_request_running_on_a_grpc_thread_finish(server):
    """A fixed-batch model's gRPC request runs on the front end's worker thread when a session is free and
    nothing is queued; the unload must wait for that pass before the session closes."""
    http, _ = _clients(server)
    http.load_model("multi_io")
    with ThreadPoolExecutor(2) as pool:
        running = pool.submit(_infer_multi_io, grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc}"))
        _wait_for(lambda: _in_server(server, "multi_io") == 1)  # running (SLOW_RUN_S), none queued
        http.unload_model("multi_io")
        np.testing.assert_array_equal(running.result(timeout=60), np.full((2, 3), 4.0, np.float32))
    assert _index(http)["multi_io"] == ("UNAVAILABLE", "unloaded")


def test_loads_and_unloads_of_one_model_at_once_run_one_at_a_time(server):
    http, grpc = _clients(server)
    calls = [(0, "load"), (1, "unload"), (1, "load"), (0, "load"), (0, "unload"), (1, "load"), (1, "load"),
             (0, "unload"), (0, "load")]  # (HTTP 0 or gRPC 1, what)  # fmt: skip
    start = threading.Barrier(len(calls))

    def call(transport: int, action: str) -> None:
        def act(client) -> None:
            start.wait(timeout=60)
            getattr(client, f"{action}_model")("embed")

        _in_own_client(server, act, transport)

    with ThreadPoolExecutor(len(calls)) as pool:
        for future in [pool.submit(call, *c) for c in calls]:
            future.result(timeout=120)  # every call succeeds: none sees another half done
    state = _index(http)["embed"]
    assert state in (("READY", ""), ("UNAVAILABLE", "unloaded")) and http.is_model_ready("embed") == (
        state[0] == "READY"
    )
    grpc.load_model("embed")
    assert http.is_model_ready("embed")
    http.load_model("multi_io")
    server.read_until(r"model 'multi_io' ready on", 60)  # the log is read past every load of embed
    opened = sum(1 for line in server.lines if "model 'embed' ready on" in line)
    assert 1 <= opened <= 1 + sum(1 for _, action in calls if action == "load")
    indices = grpcclient.InferInput("indices", [1, 5], "INT64")
    indices.set_data_from_numpy(np.array([[3, 1, 4, 1, 5]], np.int64))
    assert grpc.infer("embed", [indices]).as_numpy("embedded").shape == (1, 5, 4)


def test_where_load_and_unload_are_off_they_answer_unimplemented(catalog_paths):
    """An engine that cannot load a model everywhere (Ray's replicas) turns load/unload off; the index,
    configuration and statistics still answer, and the server metadata leaves the extension out."""
    from deploykit.serve import ServedModel, Server, ServerSettings

    settings = ServerSettings(http_port=0, grpc_port=0, metrics_port=None)
    with Server([ServedModel.from_path(catalog_paths["multi_io"])], settings=settings) as server:
        assert server.wait_ready(60)
        server.repository.control_refusal = "--engine ray routes each request to one of its replicas"
        http = httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")
        grpc = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
        message = ("load of model 'int64_embedding' | is not offered here: --engine ray routes each request to one "
                   "of its replicas. Hint: serve with --engine local")  # fmt: skip
        _refused(lambda: http.load_model("int64_embedding"), "400", message)
        _refused(lambda: grpc.load_model("int64_embedding"), "StatusCode.UNIMPLEMENTED", message)
        _refused(lambda: grpc.unload_model("multi_io"), "StatusCode.UNIMPLEMENTED", "unload of model 'multi_io' |")
        assert http.is_model_ready("multi_io") and _index(grpc)["multi_io"] == ("READY", "")
        assert not any(e.startswith("model_repository") for e in http.get_server_metadata()["extensions"])
        assert "statistics" in http.get_server_metadata()["extensions"]


def test_a_model_whose_file_went_after_an_unload_is_refused_on_load_and_loads_once_it_is_back(tmp_path, catalog_paths):
    """A load after an unload reads the model's file again: a file removed meanwhile is a load that fails its
    checks (400, INVALID_ARGUMENT, naming the file), not an internal error."""
    from deploykit.serve import ServedModel, Server, ServerSettings

    shutil.copy(catalog_paths["mlp_dynamic_batch"], tmp_path / "mlp.onnx")
    shutil.copy(catalog_paths["multi_io"], tmp_path / "multi_io.onnx")
    settings = ServerSettings(http_port=0, grpc_port=0, metrics_port=None)
    with Server([ServedModel.from_path(tmp_path / "mlp.onnx")], settings=settings) as server:
        assert server.wait_ready(60)
        http = httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")
        grpc = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
        http.load_model("multi_io")
        http.unload_model("multi_io")
        kept = (tmp_path / "multi_io.onnx").rename(tmp_path / "kept.bin")
        message = f"model 'multi_io' | fails its checks: model '{tmp_path / 'multi_io.onnx'}' | no such file."
        _refused(lambda: http.load_model("multi_io"), "400", message)
        _refused(lambda: grpc.load_model("multi_io"), "StatusCode.INVALID_ARGUMENT", message)
        assert not http.is_model_ready("multi_io") and http.is_model_ready("mlp")
        kept.rename(tmp_path / "multi_io.onnx")
        grpc.load_model("multi_io")
        assert http.is_model_ready("multi_io")
