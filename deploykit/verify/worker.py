"""Worker entry: open one model on one backend and run every input set (see ``isolated``).

Reads a JSON job on stdin — ``{model, backend, device, options, cases: [inputs.npz ...],
outputs_dir}`` — writes ``outputs-<i>.npz`` per input set and prints one result line:
``{"status": "ok", "info": session info}`` or ``{"status": "error", "error": reason}``.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from deploykit.errors import DeployKitError
from deploykit.inputs import save_arrays
from deploykit.verify.isolated import RESULT_PREFIX


def run_job(
    job: Mapping[str, Any], cases: Sequence[Mapping[str, np.ndarray]]
) -> tuple[dict[str, Any], list[dict[str, np.ndarray]]]:
    """Run the job's model on each input set; a deploykit error becomes the result's reason."""
    from deploykit.backends.registry import get_backend

    outputs: list[dict[str, np.ndarray]] = []
    info: dict[str, Any] | None = None
    seconds: dict[str, Any] = {}
    try:
        backend = get_backend(job["backend"])
        started = time.perf_counter()
        with backend.open(job["model"], job.get("device"), **dict(job.get("options") or {})) as session:
            seconds["load"] = time.perf_counter() - started
            info = session.info.to_dict()
            seconds["run"] = []
            for feeds in cases:
                started = time.perf_counter()
                outputs.append(session.run(dict(feeds)))
                seconds["run"].append(time.perf_counter() - started)
    except DeployKitError as exc:
        return {"status": "error", "error": str(exc), "info": info}, []
    # one pass, no warm-up, no statistics: what an emulated row shows, never a benchmark
    return {"status": "ok", "info": info, "seconds": seconds}, outputs


def main() -> int:
    job = json.loads(sys.stdin.read())
    cases = []
    for path in job["cases"]:
        with np.load(path, allow_pickle=False) as archive:
            cases.append({name: archive[name] for name in archive.files})
    result, outputs = run_job(job, cases)
    for index, arrays in enumerate(outputs):
        save_arrays(Path(job["outputs_dir"]) / f"outputs-{index}.npz", arrays)
    print(RESULT_PREFIX + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
