"""Conformance worker: run a chunk of node cases on one backend, raw and through deploykit.

Started by ``sweep`` through deploykit's own ``run_worker`` (``python -m tests.conformance.worker``
with a JSON job on stdin). Each case's record is appended to the job's progress file as one JSON
line, flushed before the next case starts, so when a runtime kills the process the parent knows
which case did it and starts a new worker for the rest.
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from typing import Any

from deploykit.backends.registry import get_backend
from deploykit.backends.traits import RawRuntime
from deploykit.workers import RESULT_PREFIX
from tests.conformance.cases import NodeCase
from tests.conformance.outcome import ERROR, FAIL, NOT_RUN, PASS, Outcome, mismatch

_DETAIL_CHARS = 400


def run_raw(backend: str, case: NodeCase) -> Outcome:
    runner = _raw(backend).runner()
    for inputs, expected in case.data_sets():
        try:
            produced = runner(case.model_path, inputs)
        except Exception as exc:
            return Outcome(ERROR, _text(exc), type(exc).__name__)
        reason = mismatch(expected, produced, case.rtol, case.atol)
        if reason is not None:
            return Outcome(FAIL, reason)
    return Outcome(PASS)


def run_deploykit(backend: str, case: NodeCase, options: dict[str, Any]) -> Outcome:
    import deploykit
    from deploykit.errors import DeployKitError

    try:
        with deploykit.load(case.model_path, backend, **options) as session:
            for inputs, expected in case.data_sets():
                feeds = dict(zip(session.inputs, inputs, strict=True))
                outputs = session.run(feeds)
                if list(outputs) != list(session.outputs):
                    return Outcome(FAIL, f"outputs {list(outputs)} not in graph order {list(session.outputs)}")
                reason = mismatch(expected, list(outputs.values()), case.rtol, case.atol)
                if reason is not None:
                    return Outcome(FAIL, reason)
    except DeployKitError as exc:
        # whole: the message is what the suite judges, and a cut would make it depend on its length
        return Outcome(ERROR, exc.message, type(exc).__name__)
    except Exception as exc:  # a leak: deploykit let the runtime's own exception through
        return Outcome(ERROR, _text(exc), f"leaked {type(exc).__module__}.{type(exc).__name__}")
    return Outcome(PASS)


def run_deploykit_without_converter(backend: str, case: NodeCase, options: dict[str, Any], outside: str) -> Outcome:
    """A case outside the runner's domain: deploykit with the converter made unavailable, so a
    refusal it makes up front counts, and a case it would have to convert is not run."""
    environment = _raw(backend).without_converter
    saved = {name: os.environ.get(name) for name in environment}
    os.environ.update(environment)
    try:
        outcome = run_deploykit(backend, case, options)
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    converter_missing = outcome.error_type == "BackendUnavailableError" and any(
        value in outcome.detail for value in environment.values()
    )
    if converter_missing:
        return Outcome(NOT_RUN, f"{outside}; deploykit gets as far as converting it")
    return outcome


def _raw(backend: str) -> RawRuntime:
    raw = get_backend(backend).raw
    if raw is None:  # the suite fails such a backend before it sends any case
        raise RuntimeError(f"backend '{backend}' declares no raw runner")
    return raw


def _text(exc: BaseException) -> str:
    return str(exc)[:_DETAIL_CHARS]


def main() -> int:
    job = json.loads(sys.stdin.read())
    backend, options = job["backend"], job["options"]
    warnings.simplefilter("ignore")
    with open(job["progress"], "a", encoding="utf-8") as progress:
        for item in job["cases"]:
            case = NodeCase.from_dict(item["case"])
            for side in item["sides"]:
                # announced first: if the runtime kills this process, the parent knows who did it
                progress.write(json.dumps({"name": case.name, "side": side}) + "\n")
                progress.flush()
                if side == "raw":
                    outcome = run_raw(backend, case)
                elif item.get("outside"):
                    outcome = run_deploykit_without_converter(backend, case, options, item["outside"])
                else:
                    outcome = run_deploykit(backend, case, options)
                progress.write(json.dumps({"name": case.name, "side": side, "outcome": outcome.to_dict()}) + "\n")
                progress.flush()
    print(RESULT_PREFIX + json.dumps({"status": "ok"}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
