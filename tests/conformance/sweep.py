"""Run every node case on one backend, raw and through deploykit, in chunked worker processes.

The cases are dealt round-robin into one chunk per CPU, each run by ``tests.conformance.worker``
through deploykit's ``run_worker`` (fresh interpreter, own process group, time limit) in
deploykit's ``WorkerPool``. When a runtime kills a worker, the case it was running is recorded as
a crash with the signal and a new worker takes the rest of the chunk: a crash costs one case.

Asked to (``within_domain``, as the node suite does), a backend whose raw runner states a domain
(``RawRuntime.outside``, ``sample_every``) runs only the cases inside it, and every k-th of those by sorted name; the others are recorded as not run,
with the reason, except that a case outside the domain still goes through deploykit with the
converter unavailable (``RawRuntime.without_converter``), so what deploykit refuses up front is
checked, and only a case that reaches the converter is not run there either.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deploykit.backends.options import cpu_count
from deploykit.backends.registry import get_backend
from deploykit.verify.pool import WorkerPool
from deploykit.workers import run_worker
from tests.conformance.cases import NodeCase
from tests.conformance.outcome import ERROR, NOT_RUN, Outcome

SIDES = ("raw", "deploykit")
CHUNK_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class CaseResult:
    """One case on one backend: what the raw runtime did and what deploykit did."""

    name: str
    raw: Outcome
    deploykit: Outcome


def sweep(
    backend: str, cases: Sequence[NodeCase], options: Mapping[str, Any], *, within_domain: bool = False
) -> list[CaseResult]:
    """Every case's ``CaseResult`` on ``backend``, in the order of ``cases``; with ``within_domain``
    (the node suite) only the runner's domain and sample run (``left_out``), else every case."""
    outcomes, outside = left_out(backend, cases) if within_domain else ({}, {})
    to_run = [case for case in cases if (case.name, "deploykit") not in outcomes]
    jobs = max(1, min(cpu_count(), len(to_run)))
    chunks = [list(to_run[index::jobs]) for index in range(jobs)]
    with tempfile.TemporaryDirectory(prefix="deploykit-conformance-") as scratch, WorkerPool(True, jobs) as pool:
        futures = [
            pool.submit(_run_chunk, backend, chunk, dict(options), Path(scratch) / f"progress-{index}.jsonl", outside)
            for index, chunk in enumerate(chunks)
            if chunk
        ]
        for found in pool.results(futures):
            outcomes.update(found)
    return [CaseResult(case.name, outcomes[case.name, "raw"], outcomes[case.name, "deploykit"]) for case in cases]


def left_out(backend: str, cases: Sequence[NodeCase]) -> tuple[dict[tuple[str, str], Outcome], dict[str, str]]:
    """The outcomes known before any case runs (sides not run, by the runner's domain and sample),
    and why each case outside the domain is outside it (its deploykit side runs without converter)."""
    runner = get_backend(backend).raw
    if runner is None or (runner.outside is None and runner.sample_every == 1):
        return {}, {}
    known: dict[tuple[str, str], Outcome] = {}
    outside: dict[str, str] = {}
    inside = []
    for case in cases:
        reason = runner.outside_reason(case.model_path)
        if reason is None:
            inside.append(case.name)
        else:
            outside[case.name] = f"outside {backend}'s tensor domain: {reason}"
            known[case.name, "raw"] = Outcome(NOT_RUN, outside[case.name])
    every = runner.sample_every
    for index, name in enumerate(sorted(inside)):
        if index % every:
            reason = f"not in the sample: every {every}th case of {backend}'s domain by name"
            known[name, "raw"] = known[name, "deploykit"] = Outcome(NOT_RUN, reason)
    return known, outside


def _run_chunk(
    backend: str, chunk: list[NodeCase], options: dict[str, Any], progress: Path, outside: dict[str, str]
) -> dict[tuple[str, str], Outcome]:
    outcomes: dict[tuple[str, str], Outcome] = {}
    pending = [(case, [side for side in SIDES if side == "deploykit" or case.name not in outside]) for case in chunk]
    while pending:
        progress.write_text("")
        job = {
            "backend": backend,
            "options": options,
            "progress": str(progress),
            "cases": [
                {"case": case.to_dict(), "sides": sides, "outside": outside.get(case.name)} for case, sides in pending
            ],
        }
        run = run_worker("tests.conformance.worker", job, timeout_s=CHUNK_TIMEOUT_S)
        known = len(outcomes)
        started: tuple[str, str] | None = None
        for line in progress.read_text().splitlines():
            record = json.loads(line)
            key = (record["name"], record["side"])
            if "outcome" in record:
                outcomes[key] = Outcome.from_dict(record["outcome"])
                started = None
            else:
                started = key
        if started is not None:  # the worker died inside this case: the crash is its outcome
            outcomes[started] = Outcome(ERROR, run.error or "the worker stopped", "crash")
        elif len(outcomes) == known:
            # no case got an outcome (a broken harness, not a runtime): retrying cannot help; a
            # death between cases (a runtime's destructor) just costs a new worker for the rest
            reason = run.error or "it exited without an outcome for any case"
            raise RuntimeError(f"conformance worker for {backend} made no progress: {reason}")
        pending = [
            (case, [side for side in sides if (case.name, side) not in outcomes])
            for case, sides in pending
            if any((case.name, side) not in outcomes for side in sides)
        ]
    return outcomes


def worker_environment() -> dict[str, str]:
    """PYTHONPATH for workers: the repository root, so ``tests.conformance.worker`` imports."""
    root = str(Path(__file__).resolve().parents[2])
    current = os.environ.get("PYTHONPATH", "")
    return {"PYTHONPATH": root + (os.pathsep + current if current else "")}
