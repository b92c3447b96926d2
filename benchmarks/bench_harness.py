"""The bench harness must not be the bottleneck.

1. Timing overhead per iteration: ``measure``'s timed loop around a no-op session versus the
   same calls untimed (target ≤ 2 µs).
2. A 200-iteration bench of a ~1 ms model must finish within 1.5x of its 200 timed runs plus
   load and first inference (in-process, after the runtime was imported once).
Prints one JSON line each. Run: ``.venv/bin/python benchmarks/bench_harness.py``.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx

from deploykit.backends.base import Session, SessionInfo
from deploykit.bench.config import BenchConfig
from deploykit.bench.measure import _loop
from deploykit.bench.plan import BenchPlan
from deploykit.bench.runner import benchmark

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo, for tests.assets
from tests.assets.samples import tiny_classifier


class NoopSession(Session):
    def _run(self, feeds):
        return {}


def timing_overhead() -> dict:
    session = NoopSession(Path("noop.onnx"), [], [], SessionInfo("noop", "0", "cpu", "cpu", "f32"))
    feeds: dict = {}
    calls = 200_000
    config = BenchConfig("noop", iterations=calls, warmup=0)
    timed, bare = [], []
    for _ in range(5):
        start = time.perf_counter_ns()
        _loop(session, feeds, config)
        timed.append((time.perf_counter_ns() - start) / calls)
        run = session.run
        start = time.perf_counter_ns()
        for _ in range(calls):
            run(feeds)
        bare.append((time.perf_counter_ns() - start) / calls)
    overhead_us = (statistics.median(timed) - statistics.median(bare)) / 1e3
    return {
        "benchmark": "bench_harness_timing",
        "calls": calls,
        "timed_loop_us": statistics.median(timed) / 1e3,
        "bare_loop_us": statistics.median(bare) / 1e3,
        "overhead_us_per_iteration": round(overhead_us, 3),
        "target_us": 2.0,
    }


def wall_budget() -> dict:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "classifier.onnx"
        onnx.save(tiny_classifier(size=192), path)
        x = np.random.default_rng(0).uniform(-1, 1, (1, 3, 192, 192)).astype(np.float32)
        np.savez(Path(directory) / "x.npz", images=x)
        # one short run first: importing onnxruntime is a once-per-process cost, not the harness's
        benchmark(path, BenchPlan(backends=["onnxruntime"], iterations=1, warmup=0, threads=1, isolate=False))
        start = time.perf_counter()
        result = benchmark(
            path, BenchPlan(backends=["onnxruntime"], iterations=200, warmup=0, threads=1, isolate=False)
        )
        total_s = time.perf_counter() - start
    row = result.rows[0]
    assert row.load_ms is not None and row.first_inference_ms is not None and row.wall_s is not None, row.error
    budget_s = 1.5 * (200 * row.latency_ms("mean_ms") / 1e3) + row.load_ms / 1e3 + row.first_inference_ms / 1e3
    return {
        "benchmark": "bench_harness_wall",
        "backend": "onnxruntime",
        "device": "cpu",
        "precision": "f32",
        "iterations": 200,
        "mean_ms": round(row.latency_ms("mean_ms"), 4),
        "total_s": round(total_s, 3),
        "loop_s": round(row.wall_s, 3),
        "budget_s": round(budget_s, 3),
        "within_budget": total_s <= budget_s,
    }


def main() -> int:
    print(json.dumps(timing_overhead()), flush=True)
    print(json.dumps(wall_budget()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
