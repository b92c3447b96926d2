"""Subprocess entry: measure one configuration in isolation (started by ``verify.isolated.run_worker``).

Reads a JSON job on stdin ({model, config, inputs, outputs, check_cases, cost_per_hour}), writes
the first run's outputs to ``outputs`` (and the check cases' outputs beside it as
``<outputs>.check-<i>.npz``) and prints the result row as the last line of stdout.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from deploykit.bench.config import BenchConfig
from deploykit.bench.measure import measure
from deploykit.bench.rows import Row
from deploykit.errors import DeployKitError
from deploykit.inputs import read_arrays, save_arrays
from deploykit.verify.isolated import RESULT_PREFIX
from deploykit.verify.worker import storable


def _load(path: str) -> dict[str, np.ndarray]:
    return read_arrays(path)


def main() -> int:
    job = json.loads(sys.stdin.read())
    config = BenchConfig.from_dict(job["config"])
    feeds = _load(job["inputs"])
    checks = [_load(path) for path in job.get("check_cases", [])]
    try:
        row, outputs, checked = measure(
            Path(job["model"]), config, feeds, cost_per_hour=job.get("cost_per_hour"), check_cases=checks
        )
        # a sequence output as name[0], name[1] ..., an empty optional left out: as the oracle's worker stores them
        save_arrays(job["outputs"], storable(outputs))
        for index, arrays in enumerate(checked):
            save_arrays(f"{job['outputs']}.check-{index}.npz", storable(arrays))
    except DeployKitError as exc:
        row = Row.from_failure(config, str(exc))
    print(RESULT_PREFIX + json.dumps(row.to_dict()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
