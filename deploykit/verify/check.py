"""Checks that produce verdicts: candidates (backend × device × precision) against one oracle.

Two entry points serve every command that says "pass":

- ``compare``: an ONNX file on several backends against onnx's reference evaluator (or
  the oracle named); ``deploykit compare``, recipe builds and ``predict --check`` use it.
- ``gate``: a converter's output on several backends against the source framework's outputs,
  which the converter computed (PyTorch, Darknet); ``convert torch|darknet`` use it.

Each candidate runs in its own worker process (``isolated``), so a crash is one ``error``
verdict; the oracle runs the same way. Nothing here imports ``bench`` or the CLI.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from deploykit.backends.options import OptionValue
from deploykit.backends.registry import REFERENCE_BACKEND
from deploykit.deprecation import MovedKeywords, fold_keywords
from deploykit.errors import ParityError, ResourceError, UsageError, problem_of
from deploykit.inputs import InputSetting
from deploykit.model import Model, as_model
from deploykit.verify.isolated import DEFAULT_TIMEOUT_S, CandidateRun, run_candidate
from deploykit.verify.metrics import (
    OutputMetrics,
    Thresholds,
    compare_outputs,
    is_reduced,
    normalize_precision,
    thresholds_for,
    uncomparable,
)
from deploykit.verify.pool import WorkerPool
from deploykit.verify.settings import VerifySettings
from deploykit.verify.verdict import OracleInfo, Verdict, VerificationReport, error_verdict, judge

if TYPE_CHECKING:
    from deploykit.tasks.base import Task

REPEAT_RUNS = 2
"""Passes over the input sets each candidate makes in one session: outputs that differ between two
passes are a nondeterministic runtime (``fail``), never a lucky pass. Two passes in one session catch
what varies within a process (thread races, uninitialised memory, state kept between calls); a runtime
that is wrong in some processes and right in others is caught by the oracle only in a process where it
is wrong."""


@dataclass(frozen=True)
class Candidate:
    """One configuration to check: a backend on a device, asked for a precision."""

    backend: str
    device: str | None
    precision: str | None
    options: Mapping[str, Any] = field(default_factory=dict)
    platform: str = "host"
    """Where its worker runs: ``host``, or an emulated target (``linux/arm64``, ``deploykit.platforms``)."""

    @property
    def label(self) -> str:
        text = f"{self.backend}:{self.device}" if self.device else self.backend
        text = f"{text} {self.precision}" if self.precision else text
        return text if self.platform == "host" else f"{text} on {self.platform}"


def parse_backend_spec(text: str) -> tuple[str, str | None]:
    """``openvino:CPU`` → (``openvino``, ``CPU``); ``ort`` → (``ort``, None)."""
    name, colon, device = text.strip().partition(":")
    if not name:
        raise UsageError(f"backend '{text}' | expected BACKEND or BACKEND:DEVICE.", hint="e.g. -b ort -b openvino:CPU.")
    if colon and not device.strip():  # 'ort:' is no device, not the backend's default one
        raise UsageError(
            f"backend '{text}' | names no device after ':'; expected BACKEND or BACKEND:DEVICE.",
            hint=f"write -b {name} for its default device, or a device after the colon, e.g. -b openvino:CPU.",
        )
    return name, device or None


def default_backend_specs() -> list[str]:
    """Every available backend on each device it offers (AUTO left out: it picks one of the others;
    oracle-only backends such as ``reference`` left out: they are too slow to be candidates)."""
    from deploykit.backends.registry import backend_names, get_backend

    specs = []
    for name in backend_names():
        backend = get_backend(name)
        if not backend.search.default_candidate or not backend.is_available():
            continue
        specs += [f"{name}:{device}" for device in backend.search.swept_devices(backend.devices())]
    return specs


def parse_precisions(text: str | Sequence[str] | None) -> list[str | None]:
    """``f32,bf16`` → [``f32``, ``bf16``]; None → [None] (the device's own default)."""
    if text is None:
        return [None]
    parts = text.split(",") if isinstance(text, str) else list(text)
    names = [normalize_precision(p) for p in parts if p and p.strip()]
    unknown = [p for p in names if p not in ("f64", "f32", "bf16", "f16", "int8")]
    if not names or unknown:
        raise UsageError(
            f"precision '{text}' | expected a list of f32, bf16, f16, int8 (f64 for the reference backend).",
            hint="e.g. --precision f32,bf16.",
        )
    return list(dict.fromkeys(names))


def expand_candidates(
    specs: Sequence[str] | None,
    precisions: Sequence[str | None] = ("f32",),
    *,
    model_precision: str = "f32",
    options: Mapping[str, OptionValue] | None = None,
    platform: Any = None,
) -> tuple[list[Candidate], list[str]]:
    """Every backend spec × precision the backend can run natively on ``platform`` (a
    ``deploykit.platforms.Platform``; the host when None), and one note per combination it cannot
    (``not supported here`` / ``not supported on linux/arm64``), never a silent skip.

    A backend with a precision setting runs what its device claims on that platform
    (``Backend.precisions``, asked on the host, or in an emulated target by the target's build on
    the emulated CPU); one without runs the model in the precision ``Backend.model_precision``
    says there (asking it for f32 means "no reduced setting"). An INT8 model is judged as INT8
    whatever its float parts run in. A ``precision`` among the backend options is the sweep itself
    (given twice, differently, it is an error: it would otherwise be overridden silently).
    """
    from deploykit.backends.registry import canonical_name, get_backend
    from deploykit.platforms import PLATFORMS

    platform = platform or PLATFORMS["host"]
    where = "on " + platform.name if platform.emulated else "here"
    options = dict(options or {})
    precisions = _sweep_with_option(list(precisions), options.pop("precision", None))
    own = normalize_precision(model_precision)
    candidates: list[Candidate] = []
    notes: list[str] = []
    for spec in specs or default_backend_specs():
        name, device = parse_backend_spec(spec)
        name = canonical_name(name)
        backend = get_backend(name)
        device = device or backend.default_device
        claims = platform.claims(name, device)
        available = claims is not None
        settable = "precision" in backend.options
        native = list(claims.precisions) if claims is not None and settable else []
        ran = claims.runs(own) if claims is not None and not settable else own
        seen: set[tuple[str | None, str]] = set()
        for precision in precisions:
            settings = dict(options)
            judged = precision
            if precision is not None:
                if precision == "int8" and own != "int8":
                    notes.append(
                        f"{name}:{device} int8: the model is not quantized (run 'deploykit quantize' "
                        "first, then compare the INT8 model)"
                    )
                    continue
                offered = [*native, *(["int8"] if own == "int8" else [])] if settable else sorted({ran, "f32"})
                if precision not in offered and available:
                    runs = ", ".join(offered if settable else [ran])
                    notes.append(
                        f"{name}:{device} {precision}: not supported {where} ({name} on {device} runs "
                        f"{runs}{' there' if platform.emulated else ''})"
                    )
                    continue
                if settable and precision in native:
                    settings.update(backend.precision_options(precision))
                # an INT8 model at f32 (its float parts) is judged as INT8; at bf16/f16 by that precision
                judged = "int8" if own == "int8" and precision in ("f32", "int8") else (precision if settable else ran)
            key = (judged, repr(sorted(settings.items())))
            if key in seen:  # f32 and int8 of an INT8 model on one setting are one run
                continue
            seen.add(key)
            candidates.append(Candidate(name, device, judged, settings, platform.name))
    return candidates, notes


def _sweep_with_option(precisions: list[str | None], option: OptionValue | None) -> list[str | None]:
    """The precision sweep, with a ``precision`` backend option folded in (the default sweep yields to it)."""
    if option is None:
        return precisions
    asked = normalize_precision(str(option))
    if precisions in ([None], ["f32"], [asked]):
        return [asked]
    raise UsageError(
        f"precision | given twice: --option precision={option} and --precision {','.join(str(p) for p in precisions)}.",
        hint="give the precision once, with --precision (it sweeps, e.g. --precision f32,bf16).",
    )


@dataclass
class Inputs:
    """The input sets every candidate and the oracle see, and where they came from."""

    cases: list[dict[str, np.ndarray]]
    source: str
    batch: int = 1
    images: list[str] = field(default_factory=list)

    @property
    def note(self) -> str:
        """``inputs: images (4 images)``: the line an export prints about what it verified on."""
        return f"inputs: {self.source}" + (f" ({len(self.images)} images)" if self.images else "")


def prepare_inputs(
    model: Model | str | os.PathLike[str],
    inputs: str | os.PathLike[str] | Mapping[str, np.ndarray] | None = None,
    *,
    batch: int | None = None,
    shapes: Mapping[str, Sequence[int] | InputSetting] | None = None,
    batch_axes: Mapping[str, int] | None = None,
    seed: int = 0,
    image_limit: int = 16,
) -> Inputs:
    """Seeded random data (shapes decided by ``plan_inputs``), arrays from an ``.npz`` or a dict,
    or real images (one input set per image: what task metrics need)."""
    from deploykit.inputs import InputSetting, batch_axis_of, fed_batch, load_arrays, make_inputs
    from deploykit.vision.image import IMAGE_SUFFIXES, image_cases

    interface = as_model(model)
    specs = interface.input_specs()
    settings = {k: v if isinstance(v, InputSetting) else InputSetting(tuple(v)) for k, v in (shapes or {}).items()}
    axes = {s.name: batch_axis_of(s, set(), dict(batch_axes or {})) for s in interface.inputs}
    if isinstance(inputs, (str, os.PathLike)):
        path = Path(inputs)
        if path.is_dir() or path.suffix.lower() in IMAGE_SUFFIXES:
            size = next((v.shape for v in settings.values() if v.shape and len(v.shape) == 4), None)
            cases, files = image_cases(interface, path, image_limit, (size[2], size[3]) if size else None)
            return Inputs(cases, "images", 1, [str(f) for f in files])
        given = load_arrays(path)
        return Inputs([check_given_inputs(specs, given)], "file", fed_batch(given, axes))
    if inputs is not None:
        arrays = {k: np.asarray(v) for k, v in inputs.items()}
        return Inputs([check_given_inputs(specs, arrays)], "arrays", fed_batch(arrays, axes))
    feeds = make_inputs(
        interface.inputs,
        seed=seed,
        metadata=interface.metadata_props,
        batch=batch,
        settings=settings,
        batch_axes=batch_axes,
        model_name=f"'{interface.path.name}'",
    )
    return Inputs([feeds], "seeded random", fed_batch(feeds, axes))


def check_given_inputs(specs: Mapping[str, Any], given: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """User-given arrays checked against the model's inputs (names, dtypes, shapes) before any run."""
    from deploykit.backends.validation import validate_feeds
    from deploykit.errors import InputError

    missing = [n for n in specs if n not in given]
    unknown = [n for n in given if n not in specs]
    if missing or unknown:
        raise InputError(
            f"inputs | have {', '.join(given) or 'no arrays'}; the model's inputs are {', '.join(specs)}"
            + (f" (missing {', '.join(missing)})" if missing else "")
            + (f" (not inputs: {', '.join(unknown)})" if unknown else "")
            + ".",
            hint="save one array per model input, named like the input: np.savez(path, images=x).",
        )
    return validate_feeds(specs, given)


def run_on_platform(
    model: Model | Path,
    candidate: Candidate,
    cases: Sequence[Mapping[str, np.ndarray]],
    timeout_s: float,
    isolate: bool,
    label: str | None = None,
    extra: Mapping[str, Any] | None = None,
) -> CandidateRun:
    """Run one candidate in a worker on its platform (the host's Python, or the target's under emulation),
    ``REPEAT_RUNS`` passes over the input sets in one session (``judge_run`` compares them); ``extra``
    adds to the worker's job (an oracle's memory limit, its own ``repeat_runs``)."""
    from deploykit.platforms import get_platform

    interpreter = get_platform(candidate.platform).interpreter()
    job = {"repeat_runs": REPEAT_RUNS, **dict(extra or {})}
    return run_candidate(
        model,
        candidate.backend,
        candidate.device,
        cases,
        options=candidate.options,
        label=label or candidate.label,
        timeout_s=timeout_s,
        isolate=isolate,
        interpreter=interpreter,
        extra=job,
    )


def platform_notes(platforms: str | Sequence[str] | None) -> list[str]:
    """One note per emulated platform among ``platforms``: what it emulates and with which runtime
    builds. A platform that is not prepared fails here, before anything runs (``PlatformError``
    naming what would prepare it)."""
    from deploykit.platforms import parse_platforms

    notes = []
    for platform in parse_platforms(platforms):
        if platform.emulated:
            platform.interpreter()
            notes.append(
                f"{platform.describe()}: the target's builds of the runtimes, emulated; "
                "numbers and precisions are the target's, speed is not the board's"
            )
    return notes


def on_platforms(
    specs: Sequence[str] | None,
    precisions: Sequence[str | None],
    platforms: str | Sequence[str] | None,
    *,
    model_precision: str = "f32",
    options: Mapping[str, OptionValue] | None = None,
) -> tuple[list[Candidate], list[str]]:
    """``expand_candidates`` on every platform asked for (``host`` when none), platform by platform,
    each offered the precisions its own runtimes claim (``Platform.claims``), with the notes of
    ``platform_notes``.

    With no ``specs`` the candidates are every backend × device of the host; an emulated target
    has only a CPU, so there each of those backends runs on its default device alone.
    """
    from deploykit.backends.registry import get_backend
    from deploykit.platforms import parse_platforms

    notes = platform_notes(platforms)
    expanded = []
    for platform in parse_platforms(platforms):
        chosen = specs
        if not specs and platform.emulated:
            names = dict.fromkeys(parse_backend_spec(spec)[0] for spec in default_backend_specs())
            chosen = [f"{name}:{get_backend(name).default_device}" for name in names]
        found, skipped = expand_candidates(
            chosen, precisions, model_precision=model_precision, options=options, platform=platform
        )
        expanded += found
        notes += skipped
    return expanded, notes


def judge_run(
    run: CandidateRun,
    cases: Sequence[Mapping[str, np.ndarray]],
    references: Sequence[Mapping[str, np.ndarray]],
    oracle: OracleInfo,
    *,
    precision: str | None = None,
    overrides: Mapping[str, float | None] | None = None,
    task: Task | None = None,
    task_reference: tuple[str, Sequence[Mapping[str, np.ndarray]]] | None = None,
) -> Verdict:
    """A verdict for one candidate's run: ``error`` if it did not run, else judged by its precision.

    ``references`` may cover only the first input sets (an expensive oracle runs on one image);
    the task metric compares every input set with ``task_reference`` (label, outputs): a verified
    f32 configuration's outputs.
    """
    info = run.info or {}
    if not run.ok:
        return error_verdict(run.label, oracle, run.error or "did not run", device=info.get("device"), hint=run.hint)
    # a quantized model computes in int8 whatever the runtime says of its other layers (OpenVINO: bf16)
    ran = "int8" if precision == "int8" else normalize_precision(info.get("precision") or precision)
    limits = thresholds_for(ran, **dict(overrides or {}))
    reduced = is_reduced(ran)
    outputs = []
    for index, (actual, expected) in enumerate(zip(run.outputs, references, strict=False)):
        outputs += compare_outputs(actual, expected, limits, reduced=reduced, case=index)
    result = None
    if task is not None and task_reference is not None and len(task_reference[1]) == len(run.outputs):
        result = task.judge(cases, task_reference[1], run.outputs, limits, ran)
        result.details["reference"] = task_reference[0]
    verdict = judge(run.label, outputs, oracle, limits, precision=ran, device=info.get("device"), task=result)
    if (unstable := nondeterminism(run, limits, reduced)) is not None:
        said = (
            f"nondeterministic: runs differ by {unstable.max_abs_error:.3g} — {unstable.describe()} "
            f"(a later of {len(run.repeated) + 1} runs in one session; the first run is the reference)"
        )
        # whatever its first run matched, a runtime that disagrees with itself fails; any other reason stays first
        verdict.reason = said if verdict.status == "pass" else f"{verdict.reason}; and {said}"
        verdict.status = "fail"
    return verdict


def nondeterminism(run: CandidateRun, limits: Thresholds, reduced: bool) -> OutputMetrics | None:
    """The first output whose later run in the same session differs from the first run beyond the
    precision's rule (the first run is the reference), or None when every repeat agrees."""
    for later in run.repeated:
        for index, (again, first) in enumerate(zip(later, run.outputs, strict=False)):
            for metrics in compare_outputs(again, first, limits, reduced=reduced, case=index):
                if not metrics.passed:
                    return metrics
    return None


def require_passed(verdicts: Sequence[Verdict], subject: str, oracle: OracleInfo, hint: str) -> None:
    """An export's gate: every verdict passes, or nothing is written and the ``ParityError`` names each
    failure (``subject`` is what was checked, e.g. ``export mnn 'm.onnx' | the exported file``).

    Raises:
        ParityError: a verdict is not a pass.
    """
    failed = [v for v in verdicts if v.status != "pass"]
    if failed:
        said = "; ".join(v.describe() for v in failed)
        raise ParityError(f"{subject} does not pass against {oracle.name}: {said}. Nothing was written.", hint=hint)


def judge_runs(
    runs: Sequence[tuple[CandidateRun, str | None]],
    cases: Sequence[Mapping[str, np.ndarray]],
    references: Sequence[Mapping[str, np.ndarray]] | None,
    oracle: OracleInfo,
    *,
    overrides: Mapping[str, float | None] | None = None,
    task: Task | None = None,
) -> list[Verdict]:
    """Verdicts for every (run, requested precision): element-wise/cosine against the oracle, and
    for reduced precision on real images the task metric against the first element-wise
    configuration that passed (or, without an independent oracle, that agreed): the f32 model."""
    if references is None:
        return [error_verdict(r.label, oracle, r.error or "no reference outputs ran", hint=r.hint) for r, _ in runs]
    verdicts: list[Verdict | None] = [None] * len(runs)
    task_reference: tuple[str, Sequence[Mapping[str, np.ndarray]]] | None = None
    if task is not None and oracle.independent and len(references) == len(cases):
        # the oracle's own f32 outputs on every image: every row, f32 included, gets its task metric
        task_reference = (oracle.name, list(references))
    order = sorted(range(len(runs)), key=lambda i: is_reduced((runs[i][0].info or {}).get("precision") or runs[i][1]))
    for index in order:
        run, precision = runs[index]
        verdict = judge_run(
            run,
            cases,
            references,
            oracle,
            precision=precision,
            overrides=overrides,
            task=task,
            task_reference=task_reference,
        )
        if (
            task_reference is None
            and task is not None
            and not is_reduced(verdict.precision)
            and (verdict.passed or verdict.agreement)
        ):
            task_reference = (run.label, run.outputs)
        verdicts[index] = verdict
    judged = [v for v in verdicts if v is not None]
    if task is not None:
        for verdict in judged:
            if verdict.task is None and verdict.status != "error":
                verdict.task_note = _no_task_reason(verdict, task_reference, oracle)
    return judged


def _no_task_reason(verdict: Verdict, task_reference: tuple[str, Any] | None, oracle: OracleInfo) -> str:
    """Why a row on real images has no task metric (said on the row, never left blank)."""
    if task_reference is None:
        return (
            f"no task metric: no f32 reference on every image ({oracle.name} "
            f"{'did not cover every image' if oracle.independent else 'is not an independent oracle'}, "
            "and no f32 configuration passed)"
        )
    if task_reference[0] == verdict.candidate:
        return f"no task metric: this row is the task reference ({oracle.detail or 'no independent oracle'})"
    return "no task metric: this row's outputs do not cover every image"


# The keywords of 0.1's verify_model, now fields of the VerifySettings that compare takes.
_LEGACY = (
    MovedKeywords(
        "settings",
        (
            "oracle",
            "precision",
            "batch",
            "shapes",
            "batch_axes",
            "seed",
            "thresholds",
            "options",
            "timeout_s",
            "isolate",
            "platforms",
        ),
    ),
)


def compare(
    model: Model | str | os.PathLike[str],
    backends: Sequence[str] | None = None,
    settings: VerifySettings | None = None,
    *,
    inputs: str | os.PathLike[str] | Mapping[str, np.ndarray] | None = None,
    **legacy: object,
) -> VerificationReport:
    """Run the same inputs on every candidate and judge each against the oracle.

    Args:
        model: the ``.onnx`` file, or its ``Model`` (``deploykit.model.Model.open``): it is read once.
        backends: ``BACKEND[:DEVICE]`` specs; default every available backend × device.
        settings: how to verify (``VerifySettings``: oracle, precisions, random-input shaping,
            threshold overrides, backend options, timeout, platforms); default ``VerifySettings()``:
            f32 against onnx's reference evaluator (``auto``; when it cannot run the model, the
            first candidate, and every verdict is then ``unverified``), each candidate in its own
            worker on this host.
        inputs: an ``.npz``, a dict of arrays, an image or a folder of images (which enables
            the task metric for classifiers and detectors); default seeded random data.
        **legacy: the keywords of 0.1's ``verify_model`` (``oracle``, ``precision``, ``batch``,
            ``shapes``, ``batch_axes``, ``seed``, ``thresholds``, ``options``, ``timeout_s``,
            ``isolate``, ``platforms``): still taken in this release, with a ``DeprecationWarning``
            naming ``settings=VerifySettings(...)``.

    Example:
        ``compare("m.onnx", ["ort", "openvino"], VerifySettings(precision="f32,bf16"))``
    """
    from deploykit.tasks.registry import recognise

    settings = fold_keywords("compare", legacy, {"settings": settings or VerifySettings()}, _LEGACY)["settings"]
    oracle, timeout_s, isolate, platforms = settings.oracle, settings.timeout_s, settings.isolate, settings.platforms
    interface = as_model(model)
    model_path = interface.path
    overrides = settings.thresholds.to_dict()
    candidates, notes = on_platforms(
        backends,
        parse_precisions(settings.precision),
        platforms,
        model_precision=interface.precision,
        options=settings.options,
    )
    if not candidates:
        from deploykit.platforms import parse_platforms

        names = [p.name for p in parse_platforms(platforms)]
        where = "here" if names == ["host"] else "on " + ", ".join(names)
        raise ResourceError(  # the command is sound; this machine (or target) runs none of it
            f"compare '{model_path.name}' | no backend can run the precisions asked for {where}: {'; '.join(notes)}.",
            hint="'deploykit backends' lists what runs here and 'deploykit platforms list' what a target claims; "
            "f32 runs everywhere.",
        )
    prepared = prepare_inputs(
        interface,
        inputs,
        batch=settings.batch,
        shapes=settings.shapes,
        batch_axes=settings.batch_axes,
        seed=settings.seed,
    )
    images = prepared.source == "images"
    task = recognise(interface.output_specs(), interface.metadata_props) if images else None
    if not images:
        notes.append("no task metric: the inputs are not real images (pass --inputs photos/ for top-1 agreement / mAP)")

    # on real images the oracle runs on every image: the task metric of every row (f32, bf16,
    # f16, INT8) compares it with the oracle's own f32 outputs, not with another candidate
    oracle_cases = prepared.cases
    # verification times nothing, so the oracle and the candidates run side by side (one worker each)
    # The pool runs one worker per CPU, so the longest jobs start first: an emulated worker takes
    # many times a host one, and it is on the critical path (started after the oracle, it would
    # wait for it to finish; the oracle is needed only when the verdicts are judged).
    emulated = [c.platform != "host" for c in candidates]
    why = uncomparable(interface.proto) if interface.proto is not None else None
    with WorkerPool(isolate, len(candidates) + 1) as pool:
        submitted = {
            i: pool.submit(run_on_platform, model_path, c, prepared.cases, timeout_s, isolate)
            for i, c in enumerate(candidates)
            if emulated[i]
        }
        # a model no element-wise comparison can judge (metrics.uncomparable) needs no oracle run
        pending_oracle = (
            None
            if why
            else pool.submit(
                run_oracle,
                interface,
                oracle,
                oracle_cases,
                timeout_s=timeout_s,
                isolate=isolate,
                memory_bytes=settings.oracle_memory_bytes,
            )
        )
        submitted.update(
            {
                i: pool.submit(run_on_platform, model_path, c, prepared.cases, timeout_s, isolate)
                for i, c in enumerate(candidates)
                if not emulated[i]
            }
        )
        if pending_oracle is None:
            oracle_info, references = OracleInfo("none", False, f"none can judge this model: {why}"), None
        else:
            oracle_info, references = pool.results([pending_oracle])[0]
        runs = pool.results([submitted[i] for i in range(len(candidates))])
    # an independent oracle that failed (its memory or time limit, an op it lacks) is every row's reason
    oracle_failure = oracle_info.detail if references is None and oracle_info.independent else None
    if why is None and references is None and oracle.strip().lower() in ("auto", "none", "agree"):
        # no independent oracle ran (or none was asked for): the first candidate that ran is the reference
        reference_run = next((r for r in runs if r.ok), None)
        detail = f"{oracle_info.detail}; " if oracle_info.detail else ""
        if reference_run is None:
            oracle_info = OracleInfo("none", False, detail + "no candidate ran")
        else:
            oracle_info = OracleInfo(
                reference_run.label,
                False,
                detail + f"backends compared with {reference_run.label} (no independent oracle)",
            )
            references = reference_run.outputs
    if oracle_info.detail:
        notes.append(f"oracle: {oracle_info.detail}")
    candidate_runs = [(run, c.precision) for run, c in zip(runs, candidates, strict=True)]
    if references is not None:
        references = references[: len(oracle_cases)]
    if why is not None:  # no oracle, reference or backend, can judge it: nothing is compared
        verdicts = unjudged(runs, oracle_info, why)
    else:
        verdicts = judge_runs(candidate_runs, prepared.cases, references, oracle_info, overrides=overrides, task=task)
    for verdict in verdicts:
        if oracle_failure and verdict.status == "unverified":
            verdict.reason = f"{oracle_failure.rstrip('.')}; {verdict.reason}"
    first = prepared.cases[0]
    emulated_seconds = {
        r.label: {"platform": r.platform, "emulated": True, **r.seconds} for r in runs if r.platform != "host"
    }
    return VerificationReport(
        model=str(model_path),
        oracle=oracle_info,
        verdicts=verdicts,
        inputs={k: list(v.shape) for k, v in first.items()},
        input_source=prepared.source + (f" ({len(prepared.images)} images)" if prepared.images else ""),
        notes=notes,
        emulated_seconds=emulated_seconds,
    )


def verify_model(
    model: Model | str | os.PathLike[str],
    backends: Sequence[str] | None = None,
    *,
    inputs: str | os.PathLike[str] | Mapping[str, np.ndarray] | None = None,
    **legacy: object,
) -> VerificationReport:
    """0.1's name of ``compare``, with 0.1's keywords: works in this release with a
    ``DeprecationWarning`` naming ``compare`` and the ``VerifySettings`` to pass; goes in the next."""
    settings = fold_keywords("verify_model", legacy, {"settings": VerifySettings()}, _LEGACY, renamed="compare")
    return compare(model, backends, settings["settings"], inputs=inputs)


def run_oracle(
    model: Model | str | os.PathLike[str],
    oracle: str,
    cases: Sequence[Mapping[str, np.ndarray]],
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    isolate: bool = True,
    memory_bytes: int | None = None,
) -> tuple[OracleInfo, list[dict[str, np.ndarray]] | None]:
    """The oracle's outputs on ``cases`` and who made them; None when none was asked for (``none``)
    or it could not run (``OracleInfo.detail`` says why).

    ``auto`` and ``reference`` are onnx's reference evaluator; any other value is a backend spec,
    independent only when the backend says so. The oracle's worker runs within ``timeout_s`` and an
    address-space limit of ``memory_bytes`` (default, for an independent oracle such as onnx's
    evaluator, ``limits.default_memory_bytes``: three quarters of the available memory); running out
    is said as "oracle NAME ran out of its N GiB memory limit on node ..." in ``OracleInfo.detail``,
    never an OOM kill.
    """
    from deploykit.backends.registry import canonical_name, get_backend
    from deploykit.verify.limits import default_memory_bytes

    choice = oracle.strip().lower()
    if choice in ("none", "agree"):
        return OracleInfo("none", False, "no independent oracle asked for (--oracle none)"), None
    if choice == "auto":
        choice = REFERENCE_BACKEND
    name, device = parse_backend_spec(choice)
    name = canonical_name(name)
    backend = get_backend(name)
    device = device or backend.default_device
    spec = Candidate(name, device, None, backend.precision_options("f32"))
    label = backend.oracle.label_for(backend.name, device)
    if backend.oracle.independent:
        model = as_model(model)
        if blind := backend.oracle.blind_spot_in(model):
            return OracleInfo(label, False, f"{label} is not used as the oracle: {blind}"), None
    # the default bounds the numpy oracles (onnx's evaluator), which grow without a bound of their own; a
    # runtime used as the oracle (--oracle openvino) reserves address space freely and is bounded only when asked
    limit = memory_bytes or (default_memory_bytes() if backend.oracle.independent else None)
    bound: dict[str, Any] = {"repeat_runs": 1}  # the oracle's numpy is judged by the candidates, not by itself
    if limit:
        bound.update(memory_limit_bytes=limit, limit_subject=f"oracle {label}")
    run = run_on_platform(
        model if isinstance(model, Model) else Path(model), spec, cases, timeout_s, isolate, extra=bound
    )
    if not run.ok:
        said = run.error_data is not None and run.error_data.get("subject") == f"oracle {label}"
        detail = f"oracle {label} {problem_of(run.error or '')}" if said else f"{label} did not run: {run.error}"
        return OracleInfo(label, backend.oracle.independent, detail), None
    detail = (
        backend.version() if backend.oracle.independent else f"{label} is another backend, not an independent oracle"
    )
    return OracleInfo(label, backend.oracle.independent, detail), run.outputs


def unjudged(runs: Sequence[CandidateRun], oracle: OracleInfo, why: str) -> list[Verdict]:
    """The verdicts of runs that nothing can judge (``metrics.uncomparable``): ``unverified`` with the
    reason for each run that ran, ``error`` for each that did not."""
    return [
        Verdict(
            r.label,
            "unverified",
            oracle,
            precision=(r.info or {}).get("precision"),
            device=(r.info or {}).get("device"),
            reason=f"not compared: {why}",
        )
        if r.ok
        else error_verdict(r.label, oracle, r.error or "did not run", hint=r.hint)
        for r in runs
    ]


def gate(
    model: str | os.PathLike[str],
    cases: Sequence[Mapping[str, np.ndarray]],
    references: Sequence[Mapping[str, np.ndarray]] | None,
    oracle: OracleInfo,
    backends: Sequence[str],
    settings: VerifySettings | None = None,
) -> list[Verdict]:
    """A converter's check: run its output on each backend (at ``settings.precision``, one
    precision; default f32) in a worker, judge against the source framework's ``references``. With
    no references (no oracle ran), the first backend that runs is the reference and every verdict
    is ``unverified``.

    ``settings.platforms`` (``host,linux/arm64``): each backend on each platform, as ``compare``
    runs them; the references stay the host's. ``settings.thresholds`` override the precision's."""
    settings = settings or VerifySettings()
    precision, timeout_s, isolate = settings.precision or "f32", settings.timeout_s, settings.isolate
    jobs = gate_candidates(backends, precision, settings.platforms)
    with WorkerPool(isolate, len(jobs)) as pool:
        runs = pool.results(
            [pool.submit(run_on_platform, Path(model), c, cases, timeout_s, isolate, label) for c, label in jobs]
        )
    proto = as_model(model).proto
    if proto is not None and (why := uncomparable(proto)) is not None:
        return unjudged(runs, OracleInfo("none", False, f"none can judge this model: {why}"), why)
    if references is None:
        first = next((r for r in runs if r.ok), None)
        oracle = OracleInfo(first.label if first else "none", False, oracle.detail)
        references = first.outputs if first else None
    return judge_runs(
        [(r, precision) for r in runs], cases, references, oracle, overrides=settings.thresholds.to_dict()
    )


def gate_candidates(
    backends: Sequence[str], precision: str, platforms: str | Sequence[str] | None = None
) -> list[tuple[Candidate, str]]:
    """A converter's candidates and their row labels: each backend spec on each platform, at the
    precision the source computes in (``onnxruntime``, ``onnxruntime on linux/arm64``)."""
    from deploykit.backends.registry import canonical_name, get_backend
    from deploykit.platforms import parse_platforms

    jobs = []
    for platform in parse_platforms(platforms):
        for spec in backends:
            name, device = parse_backend_spec(spec)
            name = canonical_name(name)
            backend = get_backend(name)
            label = f"{name}:{device}" if device else name
            candidate = Candidate(
                name, device or backend.default_device, None, backend.precision_options(precision), platform.name
            )
            jobs.append((candidate, label if platform.name == "host" else f"{label} on {platform.name}"))
    return jobs
