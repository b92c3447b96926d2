"""Worker entry: open one model on one backend and run every input set (see ``isolated``).

Reads a JSON job on stdin — ``{model, backend, device, options, cases: [inputs.npz ...],
outputs_dir}`` and optionally ``memory_limit_bytes`` with ``limit_subject`` (an oracle's bound,
``deploykit.verify.limits``), or ``input_options`` and ``seed`` in place of ``cases`` — writes ``outputs-<i>.npz``
per input set and prints one result line: ``{"status": "ok", "info": session info, "seconds":
{"load": s, "run": [s, ...]}}`` or ``deploykit.workers.error_result`` (the reason, and the error as data).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from deploykit.errors import DeployKitError, ResourceError
from deploykit.model import Model
from deploykit.workers import error_result, read_arrays, read_job, send_result, write_arrays


def run_job(
    job: Mapping[str, Any], cases: Sequence[Mapping[str, np.ndarray]], *, model: Model | None = None
) -> tuple[dict[str, Any], list[dict[str, np.ndarray]]]:
    """Run the job's model on each input set; a deploykit error becomes the result's reason.

    ``model``: the job's model already read (``run_candidate`` in this process), so it is not read again.

    A job with ``input_options`` (``deploykit run``'s ``--input`` values and ``seed``) makes its one
    input set here, from the session's own inputs, instead of reading ``cases``.

    A job with ``repeat_runs`` N > 1 runs every input set N times in the same session (pass after
    pass): the outputs list then holds the first pass, then the later ones, and the result's
    ``repeat_runs`` says how many passes there were (verification compares them: a runtime whose two
    runs differ is nondeterministic).
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
        source = model or job["model"]
        with backend.open(source, job.get("device"), allow_fallback=allow_fallback, **options) as session:
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
            repeat_runs = max(1, int(job.get("repeat_runs", 1)))
            for _ in range(repeat_runs - 1):
                outputs += [session.run(dict(feeds)) for feeds in cases]
    except DeployKitError as exc:
        return {**error_result(exc), "info": info}, []
    except MemoryError as exc:  # past the worker's address-space limit (or the machine's): said, not a crash
        from deploykit.verify.limits import out_of_memory

        outputs.clear()
        subject = str(job.get("limit_subject") or f"backend '{job['backend']}'")
        return {**error_result(out_of_memory(subject, job.get("memory_limit_bytes"), exc)), "info": info}, []
    # one timed pass, no warm-up, no statistics: what `deploykit run` and an emulated row show, never a benchmark
    return {"status": "ok", "info": info, "seconds": seconds, "repeat_runs": repeat_runs}, outputs


def main() -> int:
    job = read_job()
    if job.get("memory_limit_bytes"):
        from deploykit.verify.limits import apply_memory_limit

        apply_memory_limit(int(job["memory_limit_bytes"]))
    cases = [read_arrays(path) for path in job.get("cases", [])]
    result, outputs = run_job(job, cases)
    try:
        for index, arrays in enumerate(outputs):
            write_arrays(Path(job["outputs_dir"]) / f"outputs-{index}.npz", arrays)
    except OSError as exc:  # the runtime ran; handing its outputs back did not fit (a full disk, ulimit -f)
        from deploykit.io import FULL_ERRNOS

        if exc.errno not in FULL_ERRNOS:
            raise
        message = (
            f"worker | ran the model, but could not hand its outputs back: {exc.strerror} writing to "
            f"'{job['outputs_dir']}' (a full temporary folder, or a file-size limit such as ulimit -f)."
        )
        hint = "free space in the temporary folder (TMPDIR) or raise the file-size limit, then run again."
        result = {**error_result(ResourceError(message, hint=hint)), "info": result.get("info")}
    send_result(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
