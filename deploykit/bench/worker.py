"""Subprocess entry: measure one configuration in isolation (started by ``deploykit.workers.run_worker``).

Reads a JSON job on stdin ({model, config, inputs, outputs, check_cases, cost_per_hour}), writes
the first run's outputs to ``outputs`` (and the check cases' outputs beside it as
``<outputs>.check-<i>.npz``) and prints the result row as the last line of stdout.

Started as a resident worker (``deploykit.workers.ResidentWorker``), it reads one job per line and
answers each with a result line, keeping the session it opened for the first job: the rounds of a
search then cost the measurement, not a new process, the runtime's import and the model's load.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from deploykit.bench.config import BenchConfig
from deploykit.bench.measure import measure, measure_session, open_session
from deploykit.bench.rows import Row
from deploykit.errors import DeployKitError
from deploykit.workers import read_arrays, read_job, resident_jobs, send_result, write_arrays

# After a resident worker's round its runtime's threads may still spin-wait (ONNX Runtime's, OpenMP's
# blocktime) while the next candidate's round starts in another worker; it answers after they settle.
SETTLE_S = 0.25


def _write(job: dict[str, Any], outputs: dict[str, Any], checked: list[dict[str, Any]]) -> None:
    # a sequence output as name[0], name[1] ..., an empty optional left out: as the oracle's worker stores them
    write_arrays(job["outputs"], outputs)
    for index, arrays in enumerate(checked):
        write_arrays(f"{job['outputs']}.check-{index}.npz", arrays)


def main() -> int:
    job = read_job()
    config = BenchConfig.from_dict(job["config"])
    feeds = read_arrays(job["inputs"])
    checks = [read_arrays(path) for path in job.get("check_cases", [])]
    try:
        row, outputs, checked = measure(
            Path(job["model"]), config, feeds, cost_per_hour=job.get("cost_per_hour"), check_cases=checks
        )
        _write(job, outputs, checked)
    except DeployKitError as exc:
        row = Row.from_failure(config, exc)
    send_result(row.to_dict())
    return 0


def resident() -> int:
    """One job per line, on one session: every job names the same model and configuration but for its
    duration, iterations and warm-up (a job for another one is refused, not measured)."""
    session: Any = None
    opened: tuple[str, dict[str, Any]] | None = None
    load_ms = 0.0
    try:
        for job in resident_jobs():
            config = BenchConfig.from_dict(job["config"])
            key = (
                str(job["model"]),
                {k: v for k, v in config.to_dict().items() if k not in ("duration_s", "iterations", "warmup")},
            )
            try:
                if session is None:
                    session, load_ms = open_session(Path(job["model"]), config)
                    opened = key
                elif key != opened:
                    raise DeployKitError(
                        f"resident worker | was asked for another model or configuration than the one it opened "
                        f"({key[0]}); expected the same for every job.",
                        hint="start one resident worker per configuration.",
                    )
                feeds = read_arrays(job["inputs"])
                checks = [read_arrays(path) for path in job.get("check_cases", [])]
                row, outputs, checked = measure_session(
                    session, config, feeds, load_ms, cost_per_hour=job.get("cost_per_hour"), check_cases=checks
                )
                _write(job, outputs, checked)
            except DeployKitError as exc:
                row = Row.from_failure(config, exc)
            time.sleep(SETTLE_S)
            send_result(row.to_dict())
    finally:
        if session is not None:
            session.close()
    return 0


if __name__ == "__main__":
    sys.exit(resident() if "--resident" in sys.argv else main())
