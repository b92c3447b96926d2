"""Triton's statistics extension as tritonclient reads it (HTTP and gRPC), checked against the requests
the test sent: counts exact, the phases of every request inside its time in the server, batch
statistics that add up to the rows run, and the same numbers as the Prometheus counters."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest

from deploykit.serve import BatchPolicy, ServedModel, Server, ServerSettings
from tests.assets.paths import require_module

httpclient = require_module("tritonclient.http", "pip install 'tritonclient[http,grpc]'")
grpcclient = require_module("tritonclient.grpc", "pip install 'tritonclient[http,grpc]'")
from tritonclient.utils import InferenceServerException  # noqa: E402

PHASES = ("success", "fail", "queue", "compute_input", "compute_infer", "compute_output", "cache_hit", "cache_miss")
HTTP_ROWS = (1, 2, 3, 1, 1)
GRPC_CLIENTS = 8


@pytest.fixture(scope="module")
def server(catalog_paths) -> Iterator[Server]:
    models = [ServedModel.from_path(catalog_paths["mlp_dynamic_batch"], name="mlp"),
              ServedModel.from_path(catalog_paths["multi_io"])]  # fmt: skip
    # a long delay, so the concurrent gRPC requests have a chance to share forward passes
    policy = BatchPolicy(max_batch=8, max_queue_delay_ms=20)
    with Server(models, policy, ServerSettings(http_port=0, grpc_port=0, metrics_port=0)) as running:
        assert running.wait_ready(60), running.problems()
        yield running


@pytest.fixture(scope="module")
def http(server):
    return httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")


@pytest.fixture(scope="module")
def grpc(server):
    return grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")


def _http_infer(client, rows: int, width: int = 8):
    tensor = httpclient.InferInput("x", [rows, width], "FP32")
    tensor.set_data_from_numpy(np.ones((rows, width), np.float32))
    return client.infer("mlp", [tensor])


def _grpc_infer(port: int, datatype: str = "FP32"):
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{port}")
    tensor = grpcclient.InferInput("x", [1, 8], datatype)
    tensor.set_data_from_numpy(np.ones((1, 8), np.float32 if datatype == "FP32" else np.float64))
    return client.infer("mlp", [tensor])


def _from_grpc(entry: dict) -> dict:
    """gRPC's JSON form in HTTP's: int64 as numbers, and the zero values proto3 leaves out."""
    stats = entry.get("inference_stats", {})
    return {
        "name": entry["name"],
        "version": entry["version"],
        "last_inference": int(entry.get("last_inference", 0)),
        "inference_count": int(entry.get("inference_count", 0)),
        "execution_count": int(entry.get("execution_count", 0)),
        "inference_stats": {p: {k: int(stats.get(p, {}).get(k, 0)) for k in ("count", "ns")} for p in PHASES},
        "batch_stats": [
            {"batch_size": int(b["batch_size"]),
             **{p: {k: int(b.get(p, {}).get(k, 0)) for k in ("count", "ns")}
                for p in ("compute_input", "compute_infer", "compute_output")}}
            for b in entry.get("batch_stats", [])
        ],
    }  # fmt: skip


@pytest.fixture(scope="module")
def sent(server, http) -> dict[str, float]:
    """The requests of this module, sent once: what the statistics must say."""
    started_ms = time.time() * 1000
    for rows in HTTP_ROWS:
        _http_infer(http, rows)
    with ThreadPoolExecutor(GRPC_CLIENTS) as pool:
        answers = list(pool.map(lambda _: _grpc_infer(server.grpc_port), range(GRPC_CLIENTS)))
    assert all(a.as_numpy("y").shape == (1, 4) for a in answers)
    failures = 0
    for call in (lambda: _http_infer(http, 1, width=9), lambda: _grpc_infer(server.grpc_port, "FP64"),
                 lambda: _http_infer(http, 2, width=7)):  # fmt: skip
        with pytest.raises(InferenceServerException):
            call()
        failures += 1
    return {"success": len(HTTP_ROWS) + GRPC_CLIENTS, "fail": failures, "rows": sum(HTTP_ROWS) + GRPC_CLIENTS,
            "started_ms": started_ms, "finished_ms": time.time() * 1000}  # fmt: skip


def test_the_counts_are_the_requests_sent(http, grpc, sent):
    (stats,) = http.get_inference_statistics("mlp")["model_stats"]
    assert _from_grpc(grpc.get_inference_statistics("mlp", as_json=True)["model_stats"][0]) == stats
    assert stats["name"] == "mlp" and stats["version"] == "1"
    phases = stats["inference_stats"]
    assert phases["success"]["count"] == sent["success"] and phases["fail"]["count"] == sent["fail"]
    assert phases["fail"]["ns"] > 0
    for phase in ("queue", "compute_input", "compute_infer", "compute_output"):
        assert phases[phase]["count"] == sent["success"], phase  # every request answered was run once
    assert phases["cache_hit"] == phases["cache_miss"] == {"count": 0, "ns": 0}
    assert stats["inference_count"] == sent["rows"]
    batches = stats["batch_stats"]
    assert sum(b["batch_size"] * b["compute_infer"]["count"] for b in batches) == sent["rows"]
    assert sum(b["compute_infer"]["count"] for b in batches) == stats["execution_count"] <= sent["success"]
    assert all(b["compute_input"]["count"] == b["compute_infer"]["count"] == b["compute_output"]["count"]
               for b in batches)  # fmt: skip
    assert sent["started_ms"] - 1 <= stats["last_inference"] <= sent["finished_ms"] + 1


def test_the_durations_add_up(http, sent):
    (stats,) = http.get_inference_statistics("mlp", "1")["model_stats"]
    phases = stats["inference_stats"]
    success_ns = phases["success"]["ns"]
    # each request's queue wait and its batch's three phases lie inside its time in the server
    inside = sum(phases[p]["ns"] for p in ("queue", "compute_input", "compute_infer", "compute_output"))
    assert 0 < phases["compute_infer"]["ns"] <= inside <= success_ns + 4  # + rounding of four sums to ns
    # a forward pass counts once per batch and once per request of it: the requests' sum is the larger
    per_batch = sum(b["compute_infer"]["ns"] for b in stats["batch_stats"])
    assert 0 < per_batch <= phases["compute_infer"]["ns"] + len(stats["batch_stats"])


def test_the_statistics_are_the_prometheus_counters(server, http, sent):
    (stats,) = http.get_inference_statistics("mlp")["model_stats"]
    text = httpx.get(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=10).text
    labels = '{model="mlp",version="1"}'
    assert f"deploykit_inference_request_success_total{labels} {float(sent['success'])}" in text
    assert f"deploykit_inference_count_total{labels} {float(sent['rows'])}" in text
    assert f"deploykit_inference_exec_count_total{labels} {float(stats['execution_count'])}" in text
    assert 'deploykit_inference_request_failure_total{model="mlp",reason="invalid",version="1"} 3.0' in text


def test_every_model_without_a_name_and_unknown_ones_not_found(http, grpc, sent):
    everything = http.get_inference_statistics()["model_stats"]
    assert [s["name"] for s in everything] == ["mlp", "multi_io"]
    assert everything[1]["inference_count"] == 0 and everything[1]["inference_stats"]["success"]["count"] == 0
    assert len(grpc.get_inference_statistics(as_json=True)["model_stats"]) == 2
    for model, version, message in [("nosuch", "", "model 'nosuch' | is not served here"),
                                    ("mlp", "2", "model 'mlp' | has no version '2'")]:  # fmt: skip
        with pytest.raises(InferenceServerException) as http_error:
            http.get_inference_statistics(model, version)
        assert http_error.value.status() == "404" and message in http_error.value.message()
        with pytest.raises(InferenceServerException) as grpc_error:
            grpc.get_inference_statistics(model, version)
        assert grpc_error.value.status() == "StatusCode.NOT_FOUND" and message in grpc_error.value.message()
