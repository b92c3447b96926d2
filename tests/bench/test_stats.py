"""Latency statistics against values computed by hand."""

from __future__ import annotations

import pytest

from deploykit.bench.config import parse_duration, parse_int_list
from deploykit.bench.stats import cost_per_million, latency_stats
from deploykit.errors import UsageError


def test_statistics_of_one_to_ten_ms():
    stats = latency_stats([i * 1_000_000 for i in range(1, 11)])  # 1..10 ms
    assert stats.count == 10
    assert stats.min_ms == 1.0 and stats.max_ms == 10.0
    assert stats.mean_ms == pytest.approx(5.5)
    # sample std of 1..10: sqrt(sum((i-5.5)^2)/9) = sqrt(82.5/9)
    assert stats.std_ms == pytest.approx((82.5 / 9) ** 0.5)
    assert stats.cov == pytest.approx((82.5 / 9) ** 0.5 / 5.5)
    # linear interpolation: position p/100 * (n-1)
    assert stats.p50_ms == pytest.approx(5.5)
    assert stats.p90_ms == pytest.approx(9.1)
    assert stats.p95_ms == pytest.approx(9.55)
    assert stats.p99_ms == pytest.approx(9.91)
    assert stats.p999_ms == pytest.approx(9.991)


def test_one_sample():
    stats = latency_stats([2_500_000])
    assert stats.p50_ms == stats.max_ms == stats.min_ms == 2.5
    assert stats.std_ms == 0.0 and not stats.noisy


def test_noisy_flag():
    assert latency_stats([1_000_000, 1_000_000, 9_000_000]).noisy


def test_cost_per_million():
    # $0.36/h at 1000 samples/s: 1e6 samples take 1000 s = 0.2777 h → $0.10
    assert cost_per_million(0.36, 1000.0) == pytest.approx(0.1)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("10s", 10.0), ("500ms", 0.5), ("2m", 120.0), ("1.5", 1.5), ("1h", 3600.0), ("500us", 5e-4), (".5s", 0.5)],
)
def test_durations(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "ten", "-1s", "0s", "nan", "inf", "1e3s", "8d", "200h", "5 parsecs"])
def test_bad_durations(text):
    with pytest.raises(UsageError, match=r"duration '.*' \| expected a duration more than 0 and at most a week"):
        parse_duration(text)


def test_bad_batch_list():
    with pytest.raises(UsageError, match=r"batch '1,x' \| expected positive integers"):
        parse_int_list("1,x", "batch")
