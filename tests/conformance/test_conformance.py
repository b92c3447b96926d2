"""The ONNX backend node tests through every registered backend: deploykit loses nothing.

Each case runs through the raw runtime (the runner the backend declares: ``Backend.raw``) and through
``deploykit.load(...).run(...)``, in chunked worker processes. Per backend, every case the raw
runtime passes must pass through deploykit, and every case deploykit does not pass must be a
``DeployKitError`` whose message carries the runtime's reason (or a crash the raw runtime had
too). There is no expected-failure list: what the raw runtime fails is the runtime's business.
"""

from __future__ import annotations

import re
import time
from typing import Any

import pytest

from deploykit.backends.registry import backend_names, get_backend
from tests.assets.paths import missing_asset
from tests.conformance.cases import NodeCase, case_features
from tests.conformance.outcome import ERROR, Outcome
from tests.conformance.report import backend_row, summary_lines
from tests.conformance.sweep import sweep, worker_environment

# A reason that is only where the runtime's C++ threw: "Exception from src/inference/.../x.cpp:117:".
_SOURCE_LOCATION = re.compile(r"(exception from )?[\w./\\-]+\.(cpp|cc|cxx|hpp|h|c)(:\d+)*:?\.?", re.I)
_FILE_SAYS = re.compile(r"'[^']*': ")


def reason_problem(outcome: Outcome) -> str | None:
    """Why a deploykit error's message fails the house format (None when it is fine): it must be
    a ``DeployKitError`` and say, after the subject, a reason with words in it (not empty, not a
    bare source location, not a lone bracket left from the runtime's text)."""
    if outcome.error_type == "crash":
        return None  # judged against the raw runtime's own crash by the caller
    if outcome.error_type.startswith("leaked"):
        return f"the runtime's exception leaked: {outcome.error_type}"
    subject, bar, problem = outcome.detail.partition(" | ")
    if not bar or not subject:
        return "no 'subject | problem' in the message"
    said = _FILE_SAYS.search(problem)
    reason = problem[said.end() :] if said else problem
    if len(re.findall(r"[A-Za-z]{2,}", reason)) < 2:
        return f"no reason after the subject: {reason!r}"
    if _SOURCE_LOCATION.fullmatch(reason.strip()):
        return f"the reason is only a source location: {reason!r}"
    if re.search(r"(^|\s)[()\[\]<>:;,]\.?$", reason.strip()):
        return f"the reason ends in a lone bracket or colon: {reason!r}"
    return None


def require_raw_runner(backend: str) -> None:
    """Fail (never skip) for a registered backend the suite cannot measure: one that declares no raw runner."""
    if get_backend(backend).raw is None:
        pytest.fail(
            f"backend '{backend}' is registered but declares no raw runner, so the conformance suite cannot "
            f"measure it: set raw = RawRuntime('module:run_{backend}', options={{...}}) on its Backend class "
            f"(deploykit.backends.RawRuntime), naming a function run_{backend}(model_path, inputs) -> outputs that "
            "calls its runtime the way the runtime's documentation shows, and the deploykit options that "
            "configure the backend alike.",
            pytrace=False,
        )


def deploykit_options(backend: str) -> dict[str, Any]:
    """What deploykit is asked for: f32, and the raw runner's configuration (threads)."""
    found = get_backend(backend)
    assert found.raw is not None, f"backend '{backend}' declares no raw runner"
    return {**found.precision_options("f32"), **found.raw.options}


@pytest.fixture(scope="module")
def features(onnx_node_cases: list[NodeCase]) -> dict[str, set[str]]:
    return {case.name: case_features(case) for case in onnx_node_cases}


RECHECKS = 8
"""How many more times a case deploykit lost runs on both sides before the loss counts."""


def _unsteady(backend: str, cases: list[NodeCase]) -> set[str]:
    """The cases among ``cases`` (each passed raw once, failed through deploykit) whose outcome the
    runtime does not repeat in ``RECHECKS`` more runs of both sides: the raw side fails once, or the
    deploykit side passes once. Such a runtime computes the case differently from run to run (MNN
    3.6.1's causal attention with different query and key lengths passes in one fresh process and
    fails in the next, raw as well; on CI the raw side once passed five runs in a row), so one failure
    through deploykit is luck, not a loss. For a case that passes with any chance q on each side, the
    chance that all rechecks miss it is q**8 * (1 - q)**8, at most 1 in 65,536. A case the raw runtime
    passes every time and deploykit fails every time stays lost: the rule still rejects a deploykit
    that computes it wrong."""
    unsteady: set[str] = set()
    for _ in range(RECHECKS):
        steady = [case for case in cases if case.name not in unsteady]
        if not steady:
            break
        for result in sweep(backend, steady, deploykit_options(backend)):
            if not result.raw.passed or result.deploykit.passed:
                unsteady.add(result.name)
    return unsteady


@pytest.mark.slow
@pytest.mark.parametrize("backend", backend_names())
def test_deploykit_passes_every_case_the_raw_runtime_passes(
    backend: str,
    onnx_node_cases: list[NodeCase],
    features: dict[str, set[str]],
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> None:
    require_raw_runner(backend)
    reason = get_backend(backend).unavailable_reason()
    if reason:
        missing_asset(f"the {backend} backend's runtime", reason)
    reason = get_backend(backend).conversion.onnx_unavailable_reason()
    if reason:  # a converter environment is the user's to create: its absence is said, not failed
        pytest.skip(f"{backend} opens no ONNX model here: {reason}")
    for name, value in worker_environment().items():
        monkeypatch.setenv(name, value)
    started = time.perf_counter()
    results = sweep(backend, onnx_node_cases, deploykit_options(backend), within_domain=True)
    elapsed_s = time.perf_counter() - started
    row = backend_row(backend, results, features)
    rows = getattr(request.config, "_conformance_rows", [])
    request.config._conformance_rows = [*rows, row]  # type: ignore[attr-defined]  # printed in the summary
    print(f"{backend}: {elapsed_s:.1f} s", *summary_lines([row])[:3], sep="\n")

    assert row.raw_passes > 0, f"the raw {backend} passed no case: the harness is broken, not the runtime"
    lost = {r.name: r.deploykit.detail for r in results if r.raw.passed and not r.deploykit.passed}
    unsteady = _unsteady(backend, [case for case in onnx_node_cases if case.name in lost])
    if unsteady:
        print(
            f"{backend}: the runtime is not steady on {sorted(unsteady)} (its outcome changed in {RECHECKS} more runs)"
        )
    lost = {name: detail for name, detail in lost.items() if name not in unsteady}
    assert not lost, f"deploykit lost {len(lost)} case(s) the raw {backend} passes (in {RECHECKS + 1} runs): {lost}"
    badly_said = {}
    for result in results:
        if result.deploykit.status != ERROR:
            continue
        if result.deploykit.error_type == "crash":
            if result.raw.error_type != "crash":
                badly_said[result.name] = f"crashed through deploykit only: {result.deploykit.detail}"
            continue
        problem = reason_problem(result.deploykit)
        if problem is not None:
            badly_said[result.name] = f"{problem} (message: {result.deploykit.detail!r})"
    assert not badly_said, f"{len(badly_said)} deploykit error(s) without a reason on {backend}: {badly_said}"
