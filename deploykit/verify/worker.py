"""Worker entry: open one model on one backend and run every input set (see ``isolated``).

Reads a JSON job on stdin — ``{model, backend, device, options, cases: [inputs.npz ...],
outputs_dir}``, or ``input_options`` and ``seed`` in place of ``cases`` — writes ``outputs-<i>.npz``
per input set and prints one result line: ``{"status": "ok", "info": session info, "seconds":
{"load": s, "run": [s, ...]}}`` or ``{"status": "error", "error": reason, "error_data": {type, message, hint}}``.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from deploykit.errors import DeployKitError, OutputError
from deploykit.inputs import read_arrays, save_arrays
from deploykit.verify.isolated import RESULT_PREFIX, error_result


def run_job(
    job: Mapping[str, Any], cases: Sequence[Mapping[str, np.ndarray]]
) -> tuple[dict[str, Any], list[dict[str, np.ndarray]]]:
    """Run the job's model on each input set; a deploykit error becomes the result's reason.

    A job with ``input_options`` (``deploykit run``'s ``--input`` values and ``seed``) makes its one
    input set here, from the session's own inputs, instead of reading ``cases``.
    """

    from deploykit.backends.registry import get_backend

    outputs: list[dict[str, np.ndarray]] = []
    info: dict[str, Any] | None = None
    seconds: dict[str, Any] = {}
    try:
        backend = get_backend(job["backend"])
        allow_fallback = bool(job.get("allow_fallback", False))
        options = dict(job.get("options") or {})
        started = time.perf_counter()
        with backend.open(job["model"], job.get("device"), allow_fallback=allow_fallback, **options) as session:
            seconds["load"] = time.perf_counter() - started
            info = session.info.to_dict()
            if "input_options" in job:
                from deploykit.inputs import parse_input_options

                cases = [parse_input_options(job["input_options"], session.inputs, seed=int(job.get("seed", 0)))]
            seconds["run"] = []
            for feeds in cases:
                started = time.perf_counter()
                outputs.append(session.run(dict(feeds)))
                seconds["run"].append(time.perf_counter() - started)
    except DeployKitError as exc:
        return {**error_result(exc), "info": info}, []
    # one pass, no warm-up, no statistics: what `deploykit run` and an emulated row show, never a benchmark
    return {"status": "ok", "info": info, "seconds": seconds}, outputs


def storable(outputs: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Outputs as an ``.npz`` holds them without pickling: a sequence's tensors as ``name[0]``,
    ``name[1]`` ..., an empty optional left out."""
    arrays: dict[str, np.ndarray] = {}
    for name, value in outputs.items():
        if isinstance(value, list):
            arrays.update({f"{name}[{index}]": item for index, item in enumerate(value)})
        elif value is not None:
            arrays[name] = value
    return arrays


def main() -> int:
    job = json.loads(sys.stdin.read())
    cases = []
    for path in job.get("cases", []):
        cases.append(read_arrays(path))
    result, outputs = run_job(job, cases)
    try:
        for index, arrays in enumerate(outputs):
            save_arrays(Path(job["outputs_dir"]) / f"outputs-{index}.npz", storable(arrays))
    except OSError as exc:  # the runtime ran; handing its outputs back did not fit (a full disk, ulimit -f)
        from deploykit.io import FULL_ERRNOS

        if exc.errno not in FULL_ERRNOS:
            raise
        message = (
            f"worker | ran the model, but could not hand its outputs back: {exc.strerror} writing to "
            f"'{job['outputs_dir']}' (a full temporary folder, or a file-size limit such as ulimit -f)."
        )
        hint = "free space in the temporary folder (TMPDIR) or raise the file-size limit, then run again."
        result = {**error_result(OutputError(message, hint=hint)), "info": result.get("info")}
    print(RESULT_PREFIX + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
