"""``--engine ray``: the same v2 HTTP app as a Ray Serve deployment on a real local Ray, called with
tritonclient through Ray's own proxy: 2 replicas answer like ``deploykit.load(...).run``, concurrent
clients are batched by ``@serve.batch``, and a replica killed mid-load costs at most the requests it
was running while the other keeps answering and Ray brings the count back to 2."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Iterator

import httpx
import numpy as np
import pytest

import deploykit
from deploykit.distributed.cluster import loopback_only
from deploykit.errors import BackendUnavailableError
from deploykit.serve import BatchPolicy, RaySettings, ServedModel, ServerSettings
from tests.assets.paths import require_module
from tests.serve.conftest import free_port

httpclient = require_module("tritonclient.http", "pip install 'tritonclient[http,grpc]'")
psutil = require_module("psutil", "pip install psutil")
CLIENTS = 8
REPLICAS = 2


@pytest.fixture(scope="module")
def ray_server(mobilenet_v2) -> Iterator[object]:
    """A local Ray of this module's own with the app deployed as 2 replicas; Serve and Ray shut down after."""
    ray = require_module("ray", "pip install 'deploykit[serve-ray]'", "Ray (the deploykit[serve-ray] extra)")
    require_module("ray.serve", "pip install 'deploykit[serve-ray]'", "Ray Serve (the deploykit[serve-ray] extra)")
    from ray import serve

    from deploykit.serve.server import create_server

    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    with loopback_only():
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        server = create_server(
            [ServedModel.from_path(mobilenet_v2, name="mobilenet")],
            BatchPolicy(max_batch=8, max_queue_delay_ms=20),
            ServerSettings(http_port=free_port(), grpc_port=None, metrics_port=None),
            engine="ray",
            # room for a replacement beside the two; a dead replica is noticed within 2 s, not Ray's 10
            ray=RaySettings(replicas=REPLICAS, replica_cpus=0.5, health_check_period_s=2),
        )
        server.start()
        try:
            yield server
        finally:
            server.stop()
            serve.shutdown()
    finally:
        ray.shutdown()


@pytest.fixture(scope="module")
def image() -> np.ndarray:
    return np.random.default_rng(11).random((1, 3, 224, 224), dtype=np.float32)


@pytest.fixture(scope="module")
def expected(mobilenet_v2, image) -> np.ndarray:
    with deploykit.load(mobilenet_v2) as session:
        return session.run({"images": image})["output"]


def _client(server) -> httpclient.InferenceServerClient:
    return httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}", network_timeout=120)


def _infer(client, x: np.ndarray, binary: bool = True) -> np.ndarray:
    tensor = httpclient.InferInput("images", list(x.shape), "FP32")
    tensor.set_data_from_numpy(x, binary_data=binary)
    output = httpclient.InferRequestedOutput("output", binary_data=binary)
    return client.infer("mobilenet", [tensor], outputs=[output]).as_numpy("output")


def _replica_pids() -> list[int]:
    """The replicas' actor processes (Ray names them ``ray::ServeReplica:APP:DEPLOYMENT``), ours only."""
    found = []
    for process in psutil.Process().children(recursive=True):
        try:
            if "ServeReplica:deploykit" in " ".join(process.cmdline()):
                found.append(process.pid)
        except psutil.NoSuchProcess:
            pass
    return sorted(found)


def _replica_counts(server, timeout_s: float = 30) -> dict[str, dict]:
    """Each replica's metadata parameters (engine, replica id, inference and execution counts), by replica.

    Ray's router sends sequential requests to whichever replica it likes; 8 at once spread over both.
    """
    from concurrent.futures import ThreadPoolExecutor

    url = f"http://127.0.0.1:{server.http_port}/v2/models/mobilenet"
    seen: dict[str, dict] = {}
    deadline = time.monotonic() + timeout_s
    with ThreadPoolExecutor(CLIENTS) as pool:
        while len(seen) < REPLICAS and time.monotonic() < deadline:
            for answer in pool.map(lambda _: httpx.get(url, timeout=30).json()["parameters"], range(CLIENTS)):
                seen[answer["replica"]] = answer
    return seen


def test_without_ray_serve_the_engine_names_its_extra(monkeypatch, catalog_paths):
    ray = require_module("ray", "pip install 'deploykit[serve-ray]'", "Ray (the deploykit[serve-ray] extra)")
    from deploykit.serve.server import create_server

    monkeypatch.delitem(sys.modules, "deploykit.serve.ray_engine", raising=False)
    monkeypatch.setitem(sys.modules, "ray.serve", None)  # what the import system does for a missing module
    monkeypatch.delattr(ray, "serve", raising=False)
    with pytest.raises(BackendUnavailableError) as raised:
        create_server([ServedModel.from_path(catalog_paths["mlp_dynamic_batch"])], engine="ray")
    assert str(raised.value).startswith("ray serve | cannot be imported (")
    assert "--engine ray runs the server as a Ray Serve deployment" in str(raised.value)
    assert raised.value.hint == "pip install 'deploykit[serve-ray]' (or use --engine local)."


def test_the_command_serves_on_ray_and_stops_on_sigterm(command, catalog_paths):
    """``deploykit serve --engine ray``: a Ray of its own, the HTTP routes only (and it says so), and
    SIGTERM deletes the application and shuts that Ray down."""
    server = command(f"mlp={catalog_paths['mlp_dynamic_batch']}", "--engine", "ray", "--replicas", "1",
                     endpoints=("http",), timeout_s=120, env={"RAY_USAGE_STATS_ENABLED": "0"})  # fmt: skip
    assert server.grpc is None and server.metrics is None
    note = server.read_until(r"^note: --engine ray", 1)
    assert "gRPC and the metrics port are the local engine's and are off" in note
    body = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 8], "data": [0.5] * 8}]}
    answered = httpx.post(f"http://127.0.0.1:{server.http}/v2/models/mlp/infer", json=body, timeout=30)
    assert answered.status_code == 200 and answered.json()["outputs"][0]["shape"] == [1, 4]
    assert (
        httpx.get(f"http://127.0.0.1:{server.http}/v2/models/mlp", timeout=30).json()["parameters"]["engine"] == "ray"
    )
    base = f"http://127.0.0.1:{server.http}/v2"
    assert httpx.get(f"{base}/models/mlp/config", timeout=30).json()["max_batch_size"] == 8
    assert httpx.get(f"{base}/models/mlp/stats", timeout=30).json()["model_stats"][0]["inference_count"] >= 1
    refused = httpx.post(f"{base}/repository/models/mlp/unload", timeout=30)  # the replicas would disagree
    assert refused.status_code == 400 and "is not offered here: --engine ray routes each request" in refused.text
    server.process.send_signal(signal.SIGTERM)
    code, log = server.finish(60)
    assert code == 128 + signal.SIGTERM, log  # 143 after the graceful stop, as every command ends on SIGTERM
    assert "received SIGTERM: shutting down" in log and "ray serve application stopped" in log, log


def test_two_replicas_answer_the_v2_protocol_like_load_run(ray_server, image, expected):
    client = _client(ray_server)
    assert client.is_server_live() and client.is_server_ready() and client.is_model_ready("mobilenet")
    assert client.get_server_metadata()["name"] == "deploykit"
    metadata = client.get_model_metadata("mobilenet")
    assert metadata["platform"] == "deploykit-onnxruntime" and metadata["inputs"][0]["shape"] == [-1, 3, 224, 224]
    assert metadata["parameters"]["engine"] == "ray" and metadata["parameters"]["dynamic_batching"] is True
    assert len(_replica_counts(ray_server)) == REPLICAS, "Ray's proxy did not reach two replicas"
    np.testing.assert_array_equal(_infer(client, image, binary=True), expected)
    np.testing.assert_array_equal(_infer(client, image, binary=False), expected)
    # the request parsing and error form are the local server's: same status, same message
    wrong = httpx.post(f"http://127.0.0.1:{ray_server.http_port}/v2/models/mobilenet/infer", timeout=30,
                       json={"inputs": [{"name": "images", "datatype": "FP64", "shape": [1, 3, 224, 224], "data": []}]})  # fmt: skip
    assert wrong.status_code == 400
    assert wrong.json()["error"].startswith("input 'images' | got datatype FP64, expected FP32")
    assert httpx.get(f"http://127.0.0.1:{ray_server.http_port}/v2/models/other", timeout=30).status_code == 404


def test_concurrent_clients_are_batched_by_serve_batch(ray_server, mobilenet_v2):
    rng = np.random.default_rng(12)
    images = [rng.random((1, 3, 224, 224), dtype=np.float32) for _ in range(CLIENTS)]
    with deploykit.load(mobilenet_v2) as session:
        references = [session.run({"images": x})["output"] for x in images]
    before = _replica_counts(ray_server)
    barrier = threading.Barrier(CLIENTS)
    answers: list[list[np.ndarray]] = [[] for _ in range(CLIENTS)]
    errors: list[BaseException] = []

    def work(index: int) -> None:
        try:
            client = _client(ray_server)
            barrier.wait(timeout=60)
            for _ in range(3):
                answers[index].append(_infer(client, images[index]))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(CLIENTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors[0]
    for index, got in enumerate(answers):
        assert len(got) == 3
        for answer in got:  # a batch computes with other kernels than batch 1: f32 tolerances, not bits
            np.testing.assert_allclose(answer, references[index], rtol=1e-4, atol=1e-4)
    after = _replica_counts(ray_server)
    assert len(before) == len(after) == REPLICAS and set(before) == set(after), (before, after)
    rows = sum(p["inference_count"] for p in after.values()) - sum(p["inference_count"] for p in before.values())
    passes = sum(p["execution_count"] for p in after.values()) - sum(p["execution_count"] for p in before.values())
    assert rows == 3 * CLIENTS, (before, after)
    assert passes < rows, f"{rows} rows ran in {passes} forward passes: no batch larger than 1 formed"


def test_a_replica_killed_mid_load_fails_only_requests_in_flight(ray_server, image, expected):
    """The contract, as Ray Serve's router gives it: a request the killed replica was running fails
    (HTTP 500 from Ray's proxy); one not yet handed to a replica is routed to a live one. So every
    failure was in flight when the kill landed (at most one per client here, each client having one
    request outstanding), the other replica keeps answering, and the controller starts a replacement
    until the server answers with 2 replicas again."""
    from ray import serve

    victims = _replica_pids()
    assert len(victims) == REPLICAS, victims
    victim = victims[0]
    loading, stop = threading.Event(), threading.Event()
    lock = threading.Lock()
    outcomes: list[tuple[float, float, bool, str]] = []  # (sent, answered, answered correctly, error)
    killed_at: list[float] = []

    def client_loop() -> None:
        client = _client(ray_server)
        while not stop.is_set():
            sent = time.monotonic()
            try:
                answer = _infer(client, image)
                np.testing.assert_allclose(answer, expected, rtol=1e-4, atol=1e-4)
                ok, error = True, ""
            except Exception as exc:  # tritonclient's InferenceServerException, or a wrong answer
                ok, error = False, str(exc)[:160]
            with lock:
                outcomes.append((sent, time.monotonic(), ok, error))
            loading.set()

    def kill() -> None:  # its own thread: the kill does not wait on any client's progress
        if loading.wait(60):
            time.sleep(0.5)
            os.kill(victim, signal.SIGKILL)
            killed_at.append(time.monotonic())

    clients = [threading.Thread(target=client_loop, daemon=True) for _ in range(CLIENTS)]
    killer = threading.Thread(target=kill, daemon=True)
    for thread in [*clients, killer]:
        thread.start()
    killer.join(timeout=70)
    recovered_after_s = None
    deadline = time.monotonic() + 60
    while killed_at and time.monotonic() < deadline:  # the load goes on while Ray replaces the replica
        pids = _replica_pids()
        states = serve.status().applications["deploykit"].deployments["deploykit-v2"].replica_states
        if len(pids) == REPLICAS and victim not in pids and states.get("RUNNING") == REPLICAS:
            recovered_after_s = time.monotonic() - killed_at[0]
            break
        time.sleep(0.2)
    time.sleep(1.0)  # some load on the two replicas again
    stop.set()
    for thread in clients:
        thread.join(timeout=120)
    assert killed_at, "the load never started"
    assert recovered_after_s is not None, f"Ray did not bring back {REPLICAS} replicas within 60 s: {_replica_pids()}"
    kill_time = killed_at[0]
    in_flight = [o for o in outcomes if o[0] <= kill_time < o[1]]
    failures = [o for o in outcomes if not o[2]]
    answered_after = [o for o in outcomes if o[0] > kill_time and o[2]]
    print(f"replica kill: {len(outcomes)} requests, {len(in_flight)} in flight at the kill, {len(failures)} failed, "
          f"{len(answered_after)} sent after it and answered; 2 replicas again after {recovered_after_s:.1f} s; "
          f"errors: {sorted({o[3] for o in failures})}")  # fmt: skip
    assert all(o[0] <= kill_time for o in failures), "a request sent after the kill failed"
    assert len(failures) <= len(in_flight) <= CLIENTS
    assert answered_after, "no request sent after the kill was answered"
    client = _client(ray_server)
    for _ in range(2 * REPLICAS):  # and it keeps answering, correctly, with both replicas
        np.testing.assert_allclose(_infer(client, image), expected, rtol=1e-4, atol=1e-4)
    assert len(_replica_counts(ray_server)) == REPLICAS
