"""Prometheus metrics of a server, named after Triton's (``nv_inference_*`` → ``deploykit_inference_*``).

Each server owns its registry, so two servers in one process (tests, an app embedding two) keep
their counts apart. prometheus-client exposes counters with a ``_total`` suffix. The statistics
extension (``GET /v2/models/{m}/stats``, ``ModelStatistics``) is read from these same counters, so
the two never disagree.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

_LABELS = ("model", "version")
_BATCH_LABELS = (*_LABELS, "batch_size")
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
        self.failure_us = Counter(
            "deploykit_inference_request_failure_duration_us",
            "Cumulative time from a failed request's arrival to its error, microseconds.",
            _LABELS,
            registry=r,
        )
        self.queue_us = Counter(
            "deploykit_inference_queue_duration_us",
            "Cumulative time requests waited in the queue, microseconds.",
            _LABELS,
            registry=r,
        )
        self.compute_input_us = Counter(
            "deploykit_inference_compute_input_duration_us",
            "Cumulative time joining a batch's inputs, microseconds (per request, shared by a batch).",
            _LABELS,
            registry=r,
        )
        self.compute_us = Counter(
            "deploykit_inference_compute_infer_duration_us",
            "Cumulative time in the backend's forward pass, microseconds (per request, shared by a batch).",
            _LABELS,
            registry=r,
        )
        self.compute_output_us = Counter(
            "deploykit_inference_compute_output_duration_us",
            "Cumulative time splitting a batch's outputs per request, microseconds (per request, shared by a batch).",
            _LABELS,
            registry=r,
        )
        self.batch_executions = Counter(
            "deploykit_inference_batch_exec_count", "Forward passes by batch size (rows).", _BATCH_LABELS, registry=r
        )
        self.batch_input_us = Counter(
            "deploykit_inference_batch_compute_input_duration_us",
            "Cumulative time joining inputs, by batch size, microseconds (per forward pass).",
            _BATCH_LABELS,
            registry=r,
        )
        self.batch_infer_us = Counter(
            "deploykit_inference_batch_compute_infer_duration_us",
            "Cumulative forward-pass time, by batch size, microseconds (per forward pass).",
            _BATCH_LABELS,
            registry=r,
        )
        self.batch_output_us = Counter(
            "deploykit_inference_batch_compute_output_duration_us",
            "Cumulative time splitting outputs, by batch size, microseconds (per forward pass).",
            _BATCH_LABELS,
            registry=r,
        )
        self.last_inference = Gauge(
            "deploykit_inference_last_timestamp_seconds",
            "When the last request was answered with outputs (seconds since the epoch; 0: never).",
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
        self.pending = Gauge(
            "deploykit_inference_pending_request_count", "Requests waiting in the queue.", _LABELS, registry=r
        )
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
        self.failure_us = metrics.failure_us.labels(**labels)
        self.queue_us = metrics.queue_us.labels(**labels)
        self.compute_input_us = metrics.compute_input_us.labels(**labels)
        self.compute_us = metrics.compute_us.labels(**labels)
        self.compute_output_us = metrics.compute_output_us.labels(**labels)
        self.last_inference = metrics.last_inference.labels(**labels)
        self.queue_histogram = metrics.queue_histogram.labels(**labels)
        self.compute_histogram = metrics.compute_histogram.labels(**labels)
        self.batch_size = metrics.batch_size.labels(**labels)
        self.pending = metrics.pending.labels(**labels)
        self.ready = metrics.ready.labels(**labels)

    def failure(self, reason: str) -> Any:
        return self._metrics.failure.labels(**self._labels, reason=reason)

    def executed(self, rows: int, input_us: float, infer_us: float, output_us: float) -> None:
        """Record one forward pass of ``rows`` rows and its three phases (by batch size)."""
        labels = {**self._labels, "batch_size": str(rows)}
        m = self._metrics
        m.batch_executions.labels(**labels).inc()
        m.batch_input_us.labels(**labels).inc(input_us)
        m.batch_infer_us.labels(**labels).inc(infer_us)
        m.batch_output_us.labels(**labels).inc(output_us)
        self.executions.inc()
        self.inferences.inc(rows)
        self.batch_size.observe(rows)
        self.compute_histogram.observe(infer_us)

    def counts(self) -> dict[str, int]:
        """Rows run and forward passes so far (the names of Triton's statistics extension)."""
        return {
            "inference_count": int(self._value("deploykit_inference_count_total")),
            "execution_count": int(self._value("deploykit_inference_exec_count_total")),
        }

    def _value(self, sample: str, labels: dict[str, str] | None = None) -> float:
        return self._metrics.registry.get_sample_value(sample, labels or self._labels) or 0.0

    def _by_label(self, metric: Counter, label: str) -> dict[str, float]:
        """A labelled counter's ``_total`` samples for this model, by the value of ``label``."""
        values: dict[str, float] = {}
        for family in metric.collect():
            for sample in family.samples:
                mine = all(sample.labels.get(k) == v for k, v in self._labels.items())
                if sample.name.endswith("_total") and mine:
                    values[sample.labels[label]] = sample.value
        return values

    def statistics(self) -> dict[str, Any]:
        """This model's entry of Triton's statistics extension, read from the counters above.

        Durations are cumulative nanoseconds. ``success`` counts requests answered with outputs (from
        arrival to answer), ``fail`` those answered with an error; ``queue`` and ``compute_*`` count
        the requests a session ran, each request carrying its whole batch's phase durations (as in
        Triton); ``batch_stats`` counts forward passes per batch size.
        """
        m = self._metrics

        def duration(count: float, microseconds: float) -> dict[str, int]:
            return {"count": int(count), "ns": round(microseconds * 1000)}

        ran = self._value("deploykit_inference_queue_time_us_count")
        inference_stats = {
            "success": duration(
                self._value("deploykit_inference_request_success_total"),
                self._value("deploykit_inference_request_duration_us_total"),
            ),
            "fail": duration(
                sum(self._by_label(m.failure, "reason").values()),
                self._value("deploykit_inference_request_failure_duration_us_total"),
            ),
            "queue": duration(ran, self._value("deploykit_inference_queue_duration_us_total")),
            "compute_input": duration(ran, self._value("deploykit_inference_compute_input_duration_us_total")),
            "compute_infer": duration(ran, self._value("deploykit_inference_compute_infer_duration_us_total")),
            "compute_output": duration(ran, self._value("deploykit_inference_compute_output_duration_us_total")),
            "cache_hit": duration(0, 0),
            "cache_miss": duration(0, 0),
        }
        executions = self._by_label(m.batch_executions, "batch_size")
        phases = {
            name: self._by_label(metric, "batch_size")
            for name, metric in (
                ("compute_input", m.batch_input_us),
                ("compute_infer", m.batch_infer_us),
                ("compute_output", m.batch_output_us),
            )
        }
        batch_stats = [
            {"batch_size": int(size), **{name: duration(count, phases[name].get(size, 0.0)) for name in phases}}
            for size, count in sorted(executions.items(), key=lambda item: int(item[0]))
        ]
        return {
            "name": self._labels["model"],
            "version": self._labels["version"],
            "last_inference": round(self._value("deploykit_inference_last_timestamp_seconds") * 1000),
            **self.counts(),
            "inference_stats": inference_stats,
            "batch_stats": batch_stats,
        }
