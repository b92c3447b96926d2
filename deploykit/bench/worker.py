"""Subprocess entry: measure one configuration in isolation (started by ``deploykit.workers.run_worker``).

Reads a JSON job on stdin ({model, config, inputs, outputs, check_cases, cost_per_hour}), writes
the first run's outputs to ``outputs`` (and the check cases' outputs beside it as
``<outputs>.check-<i>.npz``) and prints the result row as the last line of stdout.
"""

from __future__ import annotations

import sys
from pathlib import Path

from deploykit.bench.config import BenchConfig
from deploykit.bench.measure import measure
from deploykit.bench.rows import Row
from deploykit.errors import DeployKitError
from deploykit.workers import read_arrays, read_job, send_result, write_arrays


def main() -> int:
    job = read_job()
    config = BenchConfig.from_dict(job["config"])
    feeds = read_arrays(job["inputs"])
    checks = [read_arrays(path) for path in job.get("check_cases", [])]
    try:
        row, outputs, checked = measure(
            Path(job["model"]), config, feeds, cost_per_hour=job.get("cost_per_hour"), check_cases=checks
        )
        # a sequence output as name[0], name[1] ..., an empty optional left out: as the oracle's worker stores them
        write_arrays(job["outputs"], outputs)
        for index, arrays in enumerate(checked):
            write_arrays(f"{job['outputs']}.check-{index}.npz", arrays)
    except DeployKitError as exc:
        row = Row.from_failure(config, exc)
    send_result(row.to_dict())
    return 0


if __name__ == "__main__":
    sys.exit(main())
