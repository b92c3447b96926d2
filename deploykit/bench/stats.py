"""Latency statistics from raw samples. Pure functions; no timing happens here."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

# Above this coefficient of variation the machine was too noisy for the numbers to be trusted.
NOISY_COV = 0.15


@dataclass(frozen=True)
class LatencyStats:
    """Warm-latency statistics in milliseconds; percentiles interpolate linearly between samples."""

    count: int
    min_ms: float
    mean_ms: float
    std_ms: float
    cov: float
    p50_ms: float
    p90_ms: float
    p95_ms: float
    p99_ms: float
    p999_ms: float
    max_ms: float

    @property
    def noisy(self) -> bool:
        return self.cov > NOISY_COV

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LatencyStats:
        return cls(int(data["count"]), *(float(data[k]) for k in list(cls.__dataclass_fields__)[1:]))


def latency_stats(samples_ns: Sequence[int] | np.ndarray) -> LatencyStats:
    """Statistics of latency samples given in nanoseconds.

    ``std_ms`` is the sample standard deviation (n − 1); ``cov`` is std / mean.
    """
    values = np.asarray(samples_ns, dtype=np.float64) / 1e6
    if values.size == 0:
        raise ValueError("latency_stats needs at least one sample")
    mean = float(values.mean())
    std = float(values.std(ddof=1)) if values.size > 1 else 0.0
    p50, p90, p95, p99, p999 = (float(v) for v in np.percentile(values, [50, 90, 95, 99, 99.9]))
    return LatencyStats(
        count=int(values.size),
        min_ms=float(values.min()),
        mean_ms=mean,
        std_ms=std,
        cov=std / mean if mean > 0 else 0.0,
        p50_ms=p50,
        p90_ms=p90,
        p95_ms=p95,
        p99_ms=p99,
        p999_ms=p999,
        max_ms=float(values.max()),
    )


def cost_per_million(cost_per_hour: float, samples_per_second: float) -> float:
    """Cost of one million inferences at a steady ``samples_per_second`` on a machine
    costing ``cost_per_hour``."""
    return cost_per_hour / 3600.0 * 1e6 / samples_per_second
