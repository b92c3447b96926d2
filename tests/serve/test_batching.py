"""Dynamic batching seen from outside: concurrent clients share forward passes (the batch-size histogram on
the metrics port says so), each gets its own answer, and a bounded load has no failed request."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import httpx
import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

import deploykit
from deploykit.serve import BatchPolicy, ServedModel, Server, ServerSettings
from tests.assets.paths import require_module

httpclient = require_module("tritonclient.http", "pip install 'tritonclient[http,grpc]'")
grpcclient = require_module("tritonclient.grpc", "pip install 'tritonclient[http,grpc]'")
CLIENTS = 8


def metrics(server: Server) -> dict[str, float]:
    """Every sample on the metrics port, as 'name{model="m",...}' → value."""
    text = httpx.get(f"http://127.0.0.1:{server.metrics_port}/metrics").text
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
            samples[f"{sample.name}{{{labels}}}"] = sample.value
    return samples


@pytest.fixture(scope="module")
def server(mobilenet_v2, yolov4_tiny) -> Iterator[Server]:
    models = [ServedModel.from_path(mobilenet_v2, name="mobilenet"), ServedModel.from_path(yolov4_tiny, name="yolo")]
    policy = BatchPolicy(max_batch=8, max_queue_delay_ms=20)
    with Server(models, policy, ServerSettings(http_port=0, grpc_port=0, metrics_port=0)) as running:
        assert running.wait_ready(60)
        yield running


def _clients_at_once(count: int, work) -> list:
    """Run ``work(i)`` in ``count`` threads released together; their results, or the first exception."""
    barrier = threading.Barrier(count)
    results: list = [None] * count
    errors: list[BaseException] = []

    def one(index: int) -> None:
        try:
            barrier.wait(timeout=30)
            results[index] = work(index)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    if errors:
        raise errors[0]
    return results


def test_concurrent_clients_are_batched_and_each_gets_its_own_answer(server, mobilenet_v2):
    rng = np.random.default_rng(5)
    images = [rng.random((1, 3, 224, 224), dtype=np.float32) for _ in range(CLIENTS)]
    with deploykit.load(mobilenet_v2) as session:
        expected = [session.run({"images": x})["output"] for x in images]
    before = metrics(server)
    http_clients = [httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}") for _ in range(CLIENTS // 2)]
    grpc_clients = [grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}") for _ in range(CLIENTS // 2)]

    def work(index: int) -> np.ndarray:
        module = httpclient if index % 2 == 0 else grpcclient
        client = (http_clients if index % 2 == 0 else grpc_clients)[index // 2]
        answers = []
        for _ in range(3):  # three rounds, so batches form even on a slow, shared machine
            tensor = module.InferInput("images", [1, 3, 224, 224], "FP32")
            tensor.set_data_from_numpy(images[index])
            answers.append(client.infer("mobilenet", [tensor]).as_numpy("output"))
        return np.stack(answers)

    results = _clients_at_once(CLIENTS, work)
    for index, answers in enumerate(results):
        for answer in answers:  # a batch computes with other kernels than batch 1: f32 tolerances, not bits
            np.testing.assert_allclose(answer, expected[index], rtol=1e-4, atol=1e-4)
            others = [i for i in range(CLIENTS) if i != index]
            assert all(not np.allclose(answer, expected[i], rtol=1e-4, atol=1e-4) for i in others)
    after = metrics(server)
    label = '{model="mobilenet",version="1"}'
    requests = after[f"deploykit_inference_request_success_total{label}"] - before.get(
        f"deploykit_inference_request_success_total{label}", 0)  # fmt: skip
    passes = after[f"deploykit_inference_exec_count_total{label}"] - before.get(
        f"deploykit_inference_exec_count_total{label}", 0)  # fmt: skip
    rows = after[f"deploykit_inference_batch_size_sum{label}"] - before.get(
        f"deploykit_inference_batch_size_sum{label}", 0
    )
    singles = after['deploykit_inference_batch_size_bucket{le="1.0",model="mobilenet",version="1"}']
    total = after[f"deploykit_inference_batch_size_count{label}"]
    assert requests == rows == 3 * CLIENTS
    assert passes < requests and total > singles, "no batch larger than 1 formed"
    assert after[f"deploykit_inference_queue_duration_us_total{label}"] > 0
    assert after[f"deploykit_inference_compute_infer_duration_us_total{label}"] > 0
    assert after[f"deploykit_model_ready{label}"] == 1


def test_a_static_batch_model_runs_one_request_per_pass(server, yolov4_tiny):
    x = np.random.default_rng(6).random((1, 3, 416, 416), dtype=np.float32)
    clients = [httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}") for _ in range(4)]

    def work(index: int) -> np.ndarray:
        tensor = httpclient.InferInput("images", [1, 3, 416, 416], "FP32")
        tensor.set_data_from_numpy(x)
        return clients[index].infer("yolo", [tensor]).as_numpy("detections")

    with deploykit.load(yolov4_tiny) as session:
        expected = session.run({"images": x})["detections"]
    for answer in _clients_at_once(4, work):
        np.testing.assert_array_equal(answer, expected)
    after = metrics(server)
    label = '{model="yolo",version="1"}'
    assert (
        after[f"deploykit_inference_batch_size_count{label}"] == after[f"deploykit_inference_exec_count_total{label}"]
    )
    assert after[f"deploykit_inference_batch_size_sum{label}"] == after[f"deploykit_inference_batch_size_count{label}"]


@pytest.mark.slow
def test_a_bounded_load_has_no_failed_request(server):
    """8 clients × 4 s (the 60 s run is benchmarks/serve.py): zero failures, latencies reported."""
    x = np.random.default_rng(7).random((1, 3, 224, 224), dtype=np.float32)
    stop_at = time.monotonic() + 4.0
    latencies: list[float] = []
    lock = threading.Lock()

    def work(index: int) -> int:
        client = httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")
        count = 0
        try:
            while time.monotonic() < stop_at and count < 400:
                tensor = httpclient.InferInput("images", [1, 3, 224, 224], "FP32")
                tensor.set_data_from_numpy(x)
                start = time.perf_counter()
                client.infer("mobilenet", [tensor])
                with lock:
                    latencies.append((time.perf_counter() - start) * 1e3)
                count += 1
        finally:  # in this thread: gevent's pool behind the client cannot be joined from another thread's GC
            client.close()
        return count

    before = metrics(server)
    counts = _clients_at_once(CLIENTS, work)
    after = metrics(server)
    label = '{model="mobilenet",version="1"}'
    failures = sum(v - before.get(k, 0) for k, v in after.items() if k.startswith("deploykit_inference_request_failure")
                   and 'model="mobilenet"' in k)  # fmt: skip
    assert failures == 0 and all(c > 0 for c in counts)
    assert after[f"deploykit_inference_request_success_total{label}"] - before[
        f"deploykit_inference_request_success_total{label}"] == sum(counts)  # fmt: skip
    p50, p99 = np.percentile(latencies, [50, 99])
    print(f"load: {sum(counts)} requests from {CLIENTS} clients in 4 s, p50 {p50:.1f} ms, p99 {p99:.1f} ms")
