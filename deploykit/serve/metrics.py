"""Prometheus metrics of a server, named after Triton's (``nv_inference_*`` → ``deploykit_inference_*``).

Each server owns its registry, so two servers in one process (tests, an app embedding two) keep
their counts apart. prometheus-client exposes counters with a ``_total`` suffix.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

_LABELS = ("model", "version")
BATCH_BUCKETS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 128)
LATENCY_BUCKETS_US = (100, 250, 500, 1000, 2500, 5000, 10_000, 25_000, 50_000, 100_000, 250_000, 1_000_000)


class ServerMetrics:
    """Counters and histograms per model and version."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.success = Counter(
            "deploykit_inference_request_success", "Inference requests answered with outputs.", _LABELS, registry=r
        )
        self.failure = Counter(
            "deploykit_inference_request_failure",
            "Inference requests answered with an error, by reason (invalid, unavailable, backend).",
            (*_LABELS, "reason"),
            registry=r,
        )
        self.inferences = Counter(
            "deploykit_inference_count", "Inferences performed (a batch of 4 counts 4).", _LABELS, registry=r
        )
        self.executions = Counter(
            "deploykit_inference_exec_count", "Forward passes executed (a batch of 4 counts 1).", _LABELS, registry=r
        )
        self.request_us = Counter(
            "deploykit_inference_request_duration_us",
            "Cumulative time from a request's arrival to its answer, microseconds.",
            _LABELS,
            registry=r,
        )
        self.queue_us = Counter(
            "deploykit_inference_queue_duration_us",
            "Cumulative time requests waited in the queue, microseconds.",
            _LABELS,
            registry=r,
        )
        self.compute_us = Counter(
            "deploykit_inference_compute_infer_duration_us",
            "Cumulative time in the backend's forward pass, microseconds (per request, shared by a batch).",
            _LABELS,
            registry=r,
        )
        self.queue_histogram = Histogram(
            "deploykit_inference_queue_time_us",
            "Time one request waited in the queue, microseconds.",
            _LABELS,
            buckets=LATENCY_BUCKETS_US,
            registry=r,
        )
        self.compute_histogram = Histogram(
            "deploykit_inference_compute_time_us",
            "Time of one forward pass, microseconds.",
            _LABELS,
            buckets=LATENCY_BUCKETS_US,
            registry=r,
        )
        self.batch_size = Histogram(
            "deploykit_inference_batch_size",
            "Rows per forward pass (dynamic batching).",
            _LABELS,
            buckets=BATCH_BUCKETS,
            registry=r,
        )
        self.pending = Gauge("deploykit_inference_pending_request_count", "Requests waiting in the queue.",
                             _LABELS, registry=r)  # fmt: skip
        self.ready = Gauge("deploykit_model_ready", "1 while the model is ready, else 0.", _LABELS, registry=r)

    def for_model(self, model: str, version: str) -> ModelMetrics:
        return ModelMetrics(self, model, version)


class ModelMetrics:
    """The server's metrics with one model's labels bound (what a runner records into)."""

    def __init__(self, metrics: ServerMetrics, model: str, version: str) -> None:
        labels = {"model": model, "version": version}
        self._metrics = metrics
        self._labels = labels
        self.success = metrics.success.labels(**labels)
        self.inferences = metrics.inferences.labels(**labels)
        self.executions = metrics.executions.labels(**labels)
        self.request_us = metrics.request_us.labels(**labels)
        self.queue_us = metrics.queue_us.labels(**labels)
        self.compute_us = metrics.compute_us.labels(**labels)
        self.queue_histogram = metrics.queue_histogram.labels(**labels)
        self.compute_histogram = metrics.compute_histogram.labels(**labels)
        self.batch_size = metrics.batch_size.labels(**labels)
        self.pending = metrics.pending.labels(**labels)
        self.ready = metrics.ready.labels(**labels)

    def failure(self, reason: str) -> Any:
        return self._metrics.failure.labels(**self._labels, reason=reason)

    def counts(self) -> dict[str, int]:
        """Rows run and forward passes so far (the names of Triton's statistics extension)."""
        sample = self._metrics.registry.get_sample_value
        return {
            "inference_count": int(sample("deploykit_inference_count_total", self._labels) or 0),
            "execution_count": int(sample("deploykit_inference_exec_count_total", self._labels) or 0),
        }
