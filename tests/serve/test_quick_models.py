"""A model whose forward pass takes microseconds runs on the HTTP front end's event loop when a session is
free (two thread hand-offs fewer); any other model, and any model isolated in worker processes, runs on its
runner's thread, so a slow or hung pass never holds the loop. Which thread ran each pass is recorded around the real session's ``run``."""

from __future__ import annotations

import http.client
import json
import math
import threading

import numpy as np
import pytest

from deploykit.serve import BatchPolicy, ServedModel, Server, ServerSettings
from deploykit.serve import runner as runner_module

WAIT_S = 60.0


def _request() -> tuple[bytes, dict[str, str], np.ndarray]:
    rng = np.random.default_rng(0)
    a, b = rng.random((2, 3), dtype=np.float32), rng.random((2, 3), dtype=np.float32)
    header = json.dumps({
        "inputs": [{"name": n, "datatype": "FP32", "shape": [2, 3], "parameters": {"binary_data_size": 24}}
                   for n in ("a", "b")],
        "outputs": [{"name": "z_sum", "parameters": {"binary_data": True}}],
    }).encode()  # fmt: skip
    return header + a.tobytes() + b.tobytes(), {"Inference-Header-Content-Length": str(len(header))}, a + b


def _threads_running(server: Server, name: str, monkeypatch) -> list[str]:
    """The names of the threads that run each pass of model ``name``'s session, in order, from now on."""
    (session,) = server.repository.runners[name]._sessions
    threads: list[str] = []
    run = session.run

    def recorded(feeds):
        threads.append(threading.current_thread().name)
        return run(feeds)

    monkeypatch.setattr(session, "run", recorded)
    return threads


@pytest.mark.parametrize(
    ("threshold_us", "isolate"),
    [(math.inf, False), (0.0, False), (math.inf, True)],
    ids=["every-pass-quick", "no-pass-quick", "quick-but-isolated"],
)
def test_a_quick_model_runs_on_the_event_loop_and_a_slow_one_on_its_runner(
    catalog_paths, monkeypatch, threshold_us, isolate
):
    monkeypatch.setattr(runner_module, "QUICK_INFER_US", threshold_us)
    settings = ServerSettings(http_port=0, grpc_port=None, metrics_port=None)
    model = ServedModel.from_path(catalog_paths["multi_io"], isolate=isolate)
    with Server([model], BatchPolicy(max_batch=1), settings) as server:
        assert server.wait_ready(WAIT_S), [r.problem for r in server.repository.runners.values()]
        threads = _threads_running(server, "multi_io", monkeypatch)
        body, headers, expected = _request()
        for _ in range(4):
            conn = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=WAIT_S)
            conn.request("POST", "/v2/models/multi_io/infer", body=body, headers=headers)
            response = conn.getresponse()
            reply = response.read()
            assert response.status == 200, reply
            length = int(response.getheader("inference-header-content-length"))
            np.testing.assert_array_equal(np.frombuffer(reply[length:], np.float32).reshape(2, 3), expected)
            conn.close()
    runner_thread = "serve-multi_io-0"
    if threshold_us == math.inf and not isolate:  # the first pass has no time to judge by: the runner's
        assert threads[0] == runner_thread and threads[1:] == ["serve-http"] * 3, threads
    else:  # a slow model, or one whose worker process could hang: never on the loop
        assert threads == [runner_thread] * 4, threads


def _sequence_request(length: int) -> tuple[bytes, dict[str, str]]:
    x = np.random.default_rng(length).random((1, length, 4), dtype=np.float32)
    header = json.dumps({
        "inputs": [{"name": "x", "datatype": "FP32", "shape": [1, length, 4], "parameters": {"binary_data_size": x.nbytes}}],
        "outputs": [{"name": "y", "parameters": {"binary_data": True}}],
    }).encode()  # fmt: skip
    return header + x.tobytes(), {"Inference-Header-Content-Length": str(len(header))}


def test_a_request_much_larger_than_the_typical_one_runs_on_the_runner_however_quick_the_model(
    catalog_paths, monkeypatch
):
    """A model with a dynamic sequence length takes as long as its inputs are large: a pass judged quick on
    short sequences must not hold the event loop (and every other connection) for a long one."""
    monkeypatch.setattr(runner_module, "QUICK_INFER_US", math.inf)
    settings = ServerSettings(http_port=0, grpc_port=None, metrics_port=None)
    model = ServedModel.from_path(catalog_paths["symbolic_sequence"])
    with Server([model], BatchPolicy(max_batch=1), settings) as server:
        assert server.wait_ready(WAIT_S), [r.problem for r in server.repository.runners.values()]
        threads = _threads_running(server, "symbolic_sequence", monkeypatch)
        for length in (4, 4, 4, 200_000, 4):
            body, headers = _sequence_request(length)
            conn = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=WAIT_S)
            conn.request("POST", "/v2/models/symbolic_sequence/infer", body=body, headers=headers)
            response = conn.getresponse()
            reply = response.read()
            assert response.status == 200, reply
            assert len(reply) - int(response.getheader("inference-header-content-length")) == length * 3 * 4
            conn.close()
    runner_thread = "serve-symbolic_sequence-0"
    assert threads == [runner_thread, "serve-http", "serve-http", runner_thread, "serve-http"], threads
