"""Measuring one configuration in this process: load, first inference, warm latency, throughput.

Input preparation happens before the timed region; ``session.run`` returns materialised
numpy outputs, so the clock stops only when results are in the caller's hands.
"""

from __future__ import annotations

import copy
import resource
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from deploykit.backends.registry import get_backend
from deploykit.bench.config import BenchConfig
from deploykit.bench.rows import Block, Histogram, Row
from deploykit.bench.stats import NOISY_COV, cost_per_million, latency_stats
from deploykit.model import Model

_RAPL = Path("/sys/class/powercap/intel-rapl:0/energy_uj")
_HISTOGRAM_BINS = 30
_MAX_BLOCKS = 10
_MIN_BLOCK_RUNS = 3


def _rapl_uj() -> int | None:
    try:
        return int(_RAPL.read_text())
    except (OSError, ValueError):
        return None


def _peak_rss_bytes() -> int:
    """This process image's peak RSS. VmHWM restarts at exec; ru_maxrss would carry the
    parent's peak into an isolated worker, so it is only the fallback."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def _loop(session: Any, feeds: Mapping[str, np.ndarray], config: BenchConfig) -> list[int]:
    """Timed calls until the iteration count or the duration is reached; one ns sample per call.
    With both set, the duration with at least ``iterations`` calls (a slow model still gets enough
    calls for the ranking's blocks)."""
    run, clock = session.run, time.perf_counter_ns
    samples: list[int] = []
    append = samples.append
    if config.duration_s:
        deadline = clock() + int(config.duration_s * 1e9)
        least = config.iterations or 1
        while True:
            start = clock()
            run(feeds)
            end = clock()
            append(end - start)
            if end >= deadline and len(samples) >= least:
                break
    else:
        for _ in range(config.iterations or 1):
            start = clock()
            run(feeds)
            append(clock() - start)
    return samples


def _multistream(session: Any, feeds: Mapping[str, np.ndarray], config: BenchConfig) -> tuple[list[int], float]:
    """K threads query one shared session; per-query latency and the wall time of the whole."""
    results: list[list[int]] = [[] for _ in range(config.streams)]
    errors: list[BaseException] = []
    barrier = threading.Barrier(config.streams + 1)

    def stream(index: int) -> None:
        try:
            barrier.wait()
            results[index] = _loop(session, feeds, config)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=stream, args=(k,)) for k in range(config.streams)]
    for thread in threads:
        thread.start()
    barrier.wait()
    start = time.perf_counter()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - start
    if errors:
        raise errors[0]
    return [s for samples in results for s in samples], wall


def blocks_of(samples_ns: Sequence[int], batch: int) -> list[Block]:
    """The timed runs in up to 10 consecutive slices of at least 3 runs (one slice when there are
    fewer), each with its p50, p90 and throughput: what the ranking's bootstrap resamples."""
    values = np.asarray(samples_ns, dtype=np.float64)
    count = max(1, min(_MAX_BLOCKS, values.size // _MIN_BLOCK_RUNS))
    blocks = []
    for part in np.array_split(values, count):
        p50, p90 = (float(v) / 1e6 for v in np.percentile(part, [50, 90]))
        blocks.append(Block(p50, p90, batch * part.size / (float(part.sum()) / 1e9) if part.sum() > 0 else 0.0))
    return blocks


def open_session(model: Model | Path, config: BenchConfig) -> tuple[Any, float]:
    """The configuration's session on ``model`` and its load time in ms: the backend's loading of a model
    deploykit has already read (a path is read first), not the runtime's import."""
    backend = get_backend(config.backend)
    model = backend.read_model(model)
    backend.import_runtime()
    start = time.perf_counter_ns()
    session = backend.open(model, config.device, **config.session_options())
    return session, (time.perf_counter_ns() - start) / 1e6


def measure(
    model: Model | Path,
    config: BenchConfig,
    feeds: Mapping[str, np.ndarray],
    *,
    cost_per_hour: float | None = None,
    check_cases: Sequence[Mapping[str, np.ndarray]] = (),
) -> tuple[Row, dict[str, np.ndarray], list[dict[str, np.ndarray]]]:
    """Benchmark one configuration; returns its result row, the first run's outputs, and its
    outputs on ``check_cases`` (run after timing, on the same session, for the verification).
    ``load_ms`` times the backend's loading of a model deploykit has already read (a path is read first)."""
    session, load_ms = open_session(model, config)
    with session:
        return measure_session(session, config, feeds, load_ms, cost_per_hour=cost_per_hour, check_cases=check_cases)


def measure_session(
    session: Any,
    config: BenchConfig,
    feeds: Mapping[str, np.ndarray],
    load_ms: float,
    *,
    cost_per_hour: float | None = None,
    check_cases: Sequence[Mapping[str, np.ndarray]] = (),
) -> tuple[Row, dict[str, np.ndarray], list[dict[str, np.ndarray]]]:
    """``measure`` on a session that is already open (a resident worker's, measured round after round);
    ``load_ms`` is what opening it took."""
    start = time.perf_counter_ns()
    outputs = session.run(feeds)
    first_ms = (time.perf_counter_ns() - start) / 1e6
    for _ in range(config.warmup):
        session.run(feeds)
    energy_start = _rapl_uj()
    wall_start = time.perf_counter()
    if config.scenario == "multistream":
        samples, wall = _multistream(session, feeds, config)
    else:
        samples = _loop(session, feeds, config)
        wall = time.perf_counter() - wall_start
    energy_end = _rapl_uj()
    checked = [session.run(dict(case)) for case in check_cases]
    info = copy.deepcopy(session.info)
    stats = latency_stats(samples)
    throughput = config.batch * len(samples) / wall if wall > 0 else 0.0
    energy = None
    if energy_start is not None and energy_end is not None and energy_end >= energy_start:
        energy = (energy_end - energy_start) / 1e6 / (len(samples) * config.batch)
    counts, edges = np.histogram(np.asarray(samples) / 1e6, bins=_HISTOGRAM_BINS)
    warnings = []
    if stats.noisy:
        warnings.append(
            f"latency varies a lot (CoV {stats.cov:.2f} > {NOISY_COV}): the machine is busy or "
            "throttling; compare ratios within one run, or run longer"
        )
    row = Row(
        config,
        "ok",
        session=info,
        load_ms=load_ms,
        first_inference_ms=first_ms,
        latency=stats,
        latency_histogram=Histogram([float(e) for e in edges], [int(c) for c in counts]),
        wall_s=wall,
        throughput_sps=throughput,
        peak_rss_bytes=_peak_rss_bytes(),
        energy_j_per_inference=energy,
        energy_source="rapl" if energy is not None else "unavailable",
        cost_per_million=cost_per_million(cost_per_hour, throughput) if cost_per_hour and throughput else None,
        warnings=warnings,
        blocks=blocks_of(samples, config.batch),
    )
    return row, outputs, checked
