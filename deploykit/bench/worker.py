"""Subprocess entry: measure one configuration in isolation.

Reads a JSON job on stdin ({model, config, inputs, outputs, cost_per_hour}), writes the
first run's outputs to the ``outputs`` .npz and the result row as the last line of stdout.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from deploykit.bench.config import BenchConfig
from deploykit.bench.measure import failed_row, measure
from deploykit.errors import DeployKitError
from deploykit.inputs import save_arrays

ROW_PREFIX = "DEPLOYKIT-ROW "


def main() -> int:
    job = json.loads(sys.stdin.read())
    config = BenchConfig.from_dict(job["config"])
    with np.load(job["inputs"], allow_pickle=False) as archive:
        feeds = {name: archive[name] for name in archive.files}
    try:
        row, outputs = measure(Path(job["model"]), config, feeds, cost_per_hour=job.get("cost_per_hour"))
        save_arrays(job["outputs"], outputs)
    except DeployKitError as exc:
        row = failed_row(config, str(exc))
    print(ROW_PREFIX + json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
