"""A model whose backend crashes (at load, mid-request) or hangs is marked not ready and the others keep
serving; SIGTERM during load finishes the requests in flight, then the command exits 143 (SIGINT: 130);
the command's errors are one message."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import httpx
import numpy as np
import pytest

from deploykit.serve import ServedModel, Server, ServerSettings
from tests.assets.paths import REPO, require_module
from tests.fuzz.harness import invoke_checked, usage_said
from tests.serve.conftest import PLUGINS
from tests.serve.plugins import ABORT_VALUE

httpclient = require_module("tritonclient.http", "pip install 'tritonclient[http,grpc]'")
TENSOR = {"name": "x", "datatype": "FP32", "shape": [1, 8], "data": [0.5] * 8}


@pytest.fixture
def plugins(monkeypatch):
    monkeypatch.setenv("DEPLOYKIT_BACKENDS", PLUGINS)
    # an isolated replica is a fresh interpreter that does not import from the current directory
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))


def _infer(base: str, model: str, value: float = 0.5) -> httpx.Response:
    body = {"inputs": [{**TENSOR, "data": [value] * 8}]}
    return httpx.post(f"{base}/v2/models/{model}/infer", json=body, timeout=30)


def test_a_backend_that_crashes_while_loading_costs_its_model_only(catalog_paths, plugins):
    mlp = catalog_paths["mlp_dynamic_batch"]
    models = [ServedModel.from_path(mlp, name="good"),
              ServedModel.from_path(mlp, name="crashes", backend="crasher", isolate=True)]  # fmt: skip
    with Server(models, settings=ServerSettings(http_port=0, grpc_port=None, metrics_port=None)) as server:
        assert not server.wait_ready(60)
        base = f"http://127.0.0.1:{server.http_port}"
        ready = httpx.get(f"{base}/v2/models/crashes/ready")
        assert ready.status_code == 503 and "its backend's worker process ended while loading (signal SIGABRT)" in (
            ready.json()["error"])  # fmt: skip
        assert httpx.get(f"{base}/v2/health/ready").status_code == 503  # strict readiness, as Triton's
        assert httpx.get(f"{base}/v2/health/live").status_code == 200
        assert httpx.get(f"{base}/v2/models/crashes").json()["parameters"]["state"] == "unavailable"
        refused = _infer(base, "crashes")
        assert refused.status_code == 503 and "model 'crashes' | is not ready" in refused.json()["error"]
        assert _infer(base, "good").status_code == 200


def test_a_backend_that_aborts_mid_request_marks_its_model_not_ready(catalog_paths, plugins):
    mlp = catalog_paths["mlp_dynamic_batch"]
    models = [ServedModel.from_path(mlp, name="good", isolate=True),
              ServedModel.from_path(mlp, name="fragile", backend="aborter", isolate=True)]  # fmt: skip
    with Server(models, settings=ServerSettings(http_port=0, grpc_port=None, metrics_port=0)) as server:
        assert server.wait_ready(60)
        base = f"http://127.0.0.1:{server.http_port}"
        assert _infer(base, "fragile").status_code == 200
        crashed = _infer(base, "fragile", ABORT_VALUE)
        assert crashed.status_code == 503
        assert "its backend's worker process ended while running a request (signal SIGABRT)" in crashed.json()["error"]
        assert httpx.get(f"{base}/v2/models/fragile/ready").status_code == 503
        assert _infer(base, "fragile").status_code == 503
        answered = _infer(base, "good")
        assert answered.status_code == 200 and answered.json()["outputs"][0]["shape"] == [1, 4]
        text = httpx.get(f"http://127.0.0.1:{server.metrics_port}/metrics").text
        assert 'deploykit_model_ready{model="fragile",version="1"} 0.0' in text
        assert 'deploykit_model_ready{model="good",version="1"} 1.0' in text


def test_a_backend_that_hangs_while_loading_is_killed_after_the_load_timeout(catalog_paths, plugins, tmp_path,
                                                                               monkeypatch):  # fmt: skip
    pidfile = tmp_path / "hanger.pid"
    monkeypatch.setenv("DEPLOYKIT_BACKENDS", PLUGINS + ";hanger=tests.assets.crashing_backend:HangingBackend")
    monkeypatch.setenv("DEPLOYKIT_HANGER_PIDFILE", str(pidfile))
    mlp = catalog_paths["mlp_dynamic_batch"]
    models = [ServedModel.from_path(mlp, name="good"),
              ServedModel.from_path(mlp, name="hangs", backend="hanger", isolate=True)]  # fmt: skip
    settings = ServerSettings(http_port=0, grpc_port=None, metrics_port=None, load_timeout_s=3)
    with Server(models, settings=settings) as server:
        assert not server.wait_ready(30)
        runner = server.repository.runner("hangs")
        assert "its worker did not finish loading within 3 s; killed" in (runner.problem or "")
        assert _infer(f"http://127.0.0.1:{server.http_port}", "good").status_code == 200
        pid = int(pidfile.read_text())
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


@pytest.mark.slow
def test_sigterm_during_load_finishes_the_requests_in_flight(command, mobilenet_v2):
    server = command(str(mobilenet_v2), "--max-queue-delay", "30ms", "--shutdown-timeout", "20")
    x = np.random.default_rng(8).random((1, 3, 224, 224), dtype=np.float32)
    outcomes: list[tuple[float, str]] = []  # (start, "ok" / error text)
    lock = threading.Lock()
    stop = threading.Event()

    def client() -> None:
        http = httpclient.InferenceServerClient(f"127.0.0.1:{server.http}", network_timeout=30)
        while not stop.is_set():
            tensor = httpclient.InferInput("images", [1, 3, 224, 224], "FP32")
            tensor.set_data_from_numpy(x)
            start = time.monotonic()
            try:
                http.infer("mobilenet_v2", [tensor])
                outcome = "ok"
            except Exception as exc:
                outcome = f"{type(exc).__name__}: {exc}"
            with lock:
                outcomes.append((start, outcome))
            if outcome != "ok":
                return

    threads = [threading.Thread(target=client) for _ in range(8)]
    for thread in threads:
        thread.start()
    time.sleep(2.0)
    signalled = time.monotonic()
    server.process.send_signal(signal.SIGTERM)
    code, log = server.finish(30)
    stop.set()
    for thread in threads:
        thread.join(timeout=30)
    assert code == 128 + signal.SIGTERM, log  # 143, as every command ends on SIGTERM, after the graceful stop
    before = [outcome for start, outcome in outcomes if start < signalled - 0.05]
    assert len(before) > 8 and all(outcome == "ok" for outcome in before), [o for o in before if o != "ok"][:3]
    assert "received SIGTERM: shutting down" in log and "server stopped" in log and "Traceback" not in log


def _deploykit(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "deploykit.cli.main", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=60)  # fmt: skip


def test_the_command_refuses_bad_settings_with_one_message(tmp_path, catalog_paths):
    mlp = str(catalog_paths["mlp_dynamic_batch"])
    empty = tmp_path / "token"
    empty.write_text("  \n")
    cases = [
        ((mlp, "--host", "0.0.0.0"), "error: --host 0.0.0.0 | is not a loopback address", "--allow-remote"),
        ((mlp, "--token-file", str(empty)), "error: --token-file '", "| holds no token"),
        ((mlp, f"bad name={mlp}"), "error: model name 'bad name' | is not a protocol model name.", ""),
        ((mlp, mlp), "error: model name 'mlp_dynamic_batch' | is served twice.", "NAME=path"),
        ((mlp, "--max-request-size", "huge"), "error: --max-request-size 'huge' | is not a size.", ""),
        ((mlp, "--engine", "k8s"), "error: --engine 'k8s' | is not local or ray.", "--engine local"),
        (
            (mlp, "--http-port", "9000", "--grpc-port", "9000"),
            "error: --grpc-port 9000 | is also given to --http-port",
            "pass another port to --grpc-port",
        ),
        ((mlp, "--replicas", "2"), "error: --replicas | belongs to --engine ray.", "pass --engine ray"),
        (
            (mlp, "--engine", "ray", "--grpc-port", "8001"),
            "error: --grpc-port 8001 | is served by the local engine only",
            "leave --grpc-port out",
        ),
        (
            (mlp, "--engine", "ray", "--metrics-port", "0"),
            "error: --metrics-port 0 | is served by the local engine only",
            "--engine local",
        ),
        (
            (mlp, "--engine", "ray", "--min-replicas", "1"),
            "error: --min-replicas/--max-replicas | only one of the autoscaling bounds",
            "pass both",
        ),
        (
            (mlp, "--engine", "ray", "--replicas", "3", "--min-replicas", "1", "--max-replicas", "2"),
            "error: --min-replicas 1 --replicas 3 --max-replicas 2 | expected 0 <= min <= replicas <= max",
            "",
        ),
    ]
    for args, start, hint in cases:  # the caller's mistakes: usage errors, exit 2
        done = invoke_checked(["serve", *args])
        assert done.exit_code == 2 and done.stderr.startswith(start) and hint in done.stderr, (args, done.stderr)
    missing = invoke_checked(["serve", str(tmp_path / "missing.onnx")])  # a model that is not there: a failure
    assert missing.exit_code == 1 and missing.stderr.startswith("error: model '"), missing.stderr
    assert "| no such file." in missing.stderr
    assert invoke_checked(["serve", mlp, "--no-such-flag"]).exit_code == 2
    for args, said in (
        (("--max-queue-delay", "soon"), "Invalid value for '--max-queue-delay': 'soon': expected a duration"),
        # sweep 4 of round three: 1h passed the parser and ended as "--max-queue-delay 3.6e+06ms | expected 0 to 10000 ms"
        (("--max-queue-delay", "1h"), "Invalid value for '--max-queue-delay': '1h' is longer than 10 s"),
        (("--max-queue-delay", "20000"), "Invalid value for '--max-queue-delay': '20000' is longer than 10 s"),
        (("--max-batch", "0"), "Invalid value for '--max-batch': '0': expected an integer in [1, 1000000000]"),
        (("--shutdown-timeout", "nan"), "Invalid value for '--shutdown-timeout': 'nan': expected a duration"),
        (("--http-port", "http"), "Invalid value for '--http-port': 'http': expected an integer in [0, 65535]"),
    ):
        done = invoke_checked(["serve", mlp, *args])
        assert done.exit_code == 2 and said in usage_said(done.output), (args, done.output)


def test_a_taken_port_is_one_message(catalog_paths):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        done = _deploykit("serve", str(catalog_paths["mlp_dynamic_batch"]), "--http-port", str(port))
        # sweep 21c: a gRPC port in use (or the HTTP port given twice) was grpcio's RuntimeError traceback
        grpc_taken = _deploykit("serve", str(catalog_paths["mlp_dynamic_batch"]), "--http-port", "0",
                                "--grpc-port", str(port), "--metrics-port", "none")  # fmt: skip
    assert done.returncode == 1 and f"error: --http-port {port} | cannot bind 127.0.0.1:{port}" in done.stderr
    assert "Traceback" not in done.stderr
    assert grpc_taken.returncode == 1 and "Traceback" not in grpc_taken.stderr, grpc_taken.stderr
    assert f"error: --grpc-port {port} | cannot bind 127.0.0.1:{port}: the port is in use" in grpc_taken.stderr
    said = [line for line in grpc_taken.stderr.splitlines() if line.strip()]
    assert all(line.startswith(("serve:", "error:")) for line in said), grpc_taken.stderr  # not gRPC's own log


def test_serve_answers_the_same_from_the_command(command, catalog_paths):
    server = command(f"mlp={catalog_paths['mlp_dynamic_batch']}", "--instances", "2", "--max-batch", "4")
    base = f"http://127.0.0.1:{server.http}"
    answered = _infer(base, "mlp")
    assert answered.status_code == 200
    metadata = httpx.get(f"{base}/v2/models/mlp").json()
    assert metadata["parameters"]["instances"] == 2 and metadata["parameters"]["max_batch"] == 4
    assert json.loads(httpx.get(f"{base}/v2").text)["name"] == "deploykit"
    server.process.send_signal(signal.SIGINT)
    code, log = server.finish(30)
    assert code == 128 + signal.SIGINT and "received SIGINT: shutting down" in log, log  # 130, as for Ctrl-C
    assert "server stopped" in log and log.rstrip().endswith("deploykit: stopped by Ctrl-C (SIGINT)."), log
    assert "Traceback" not in log


def test_a_full_queue_refuses_with_503_and_counts_it(catalog_paths, plugins):
    from concurrent.futures import ThreadPoolExecutor

    from deploykit.serve import BatchPolicy

    models = [ServedModel.from_path(catalog_paths["mlp_dynamic_batch"], name="slow", backend="slow")]
    policy = BatchPolicy(max_batch=1, max_queue=1)
    with Server(models, policy, ServerSettings(http_port=0, grpc_port=None, metrics_port=0)) as server:
        assert server.wait_ready(30)
        base = f"http://127.0.0.1:{server.http_port}"
        with ThreadPoolExecutor(2) as pool:
            running = pool.submit(_infer, base, "slow")  # taken by the session, which sleeps
            time.sleep(0.2)
            queued = pool.submit(_infer, base, "slow")  # the one place in the queue
            time.sleep(0.2)
            refused = _infer(base, "slow")
            assert running.result().status_code == 200 and queued.result().status_code == 200
        assert refused.status_code == 503
        assert "model 'slow' | its queue is full (1 waiting, the --max-queue bound)" in refused.json()["error"]
        text = httpx.get(f"http://127.0.0.1:{server.metrics_port}/metrics").text
        assert 'deploykit_inference_request_failure_total{model="slow",reason="unavailable",version="1"} 1.0' in text


def test_an_isolated_replica_says_a_load_error_as_the_server_itself_would(catalog_paths, plugins):
    """The error crosses the process boundary as data: the same class, message and hint."""
    mlp = catalog_paths["mlp_dynamic_batch"]
    models = [ServedModel.from_path(mlp, name="here", options={"no_such_option": 1}),
              ServedModel.from_path(mlp, name="there", options={"no_such_option": 1}, isolate=True)]  # fmt: skip
    with Server(models, settings=ServerSettings(http_port=0, grpc_port=None, metrics_port=None)) as server:
        assert not server.wait_ready(30)
        here, there = server.repository.runner("here").problem, server.repository.runner("there").problem
        assert here and "no_such_option" in here
        assert there == here


def test_an_isolated_replica_answers_as_the_server_itself_would(catalog_paths, plugins):
    mlp = catalog_paths["mlp_dynamic_batch"]
    models = [ServedModel.from_path(mlp, name="here"), ServedModel.from_path(mlp, name="there", isolate=True)]
    with Server(models, settings=ServerSettings(http_port=0, grpc_port=None, metrics_port=None)) as server:
        assert server.wait_ready(60)
        base = f"http://127.0.0.1:{server.http_port}"
        for value in (0.5, -2.0):
            here, there = _infer(base, "here", value).json(), _infer(base, "there", value).json()
            assert there["outputs"] == here["outputs"]
            assert here["outputs"][0]["shape"] == [1, 4]
