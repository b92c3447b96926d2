"""Run a benchmark: expand configurations (backend × device × precision × batch × threads),
measure each in its own worker process, and judge every configuration's outputs through the
verification subsystem (an independent oracle when one runs; the task metric on real images for
reduced precision), then pick the fastest verified configuration.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from deploykit.bench import judging
from deploykit.bench.config import BenchConfig, check_timing
from deploykit.bench.fingerprint import fingerprint
from deploykit.bench.load import BackgroundLoad, background_load
from deploykit.bench.measure import measure
from deploykit.bench.plan import BenchPlan
from deploykit.bench.report import BenchmarkReport
from deploykit.bench.rows import BenchSettings, ModelInfo, Row
from deploykit.deprecation import MovedKeywords, fold_keywords
from deploykit.errors import DeployKitError, ModelError, ResourceError
from deploykit.inputs import batch_axis_of, fed_batch, load_arrays, make_inputs
from deploykit.io import file_sha256
from deploykit.model import Model, as_model
from deploykit.verify.check import (
    Candidate,
    check_given_inputs,
    default_backend_specs,
    expand_candidates,
    judge_runs,
    parse_precisions,
    run_oracle,
)
from deploykit.verify.isolated import CandidateRun
from deploykit.verify.verdict import OracleInfo
from deploykit.workers import ResidentWorker, read_arrays, run_worker, write_arrays

Progress = Callable[[int, int, str], None]
IMAGE_CHECK_LIMIT = 8

__all__ = ["BenchPlan", "benchmark", "default_backend_specs", "expand_configs"]


def expand_configs(
    candidates: Sequence[Candidate],
    *,
    batches: Sequence[int] = (1,),
    threads: Sequence[int | None] = (None,),
    scenario: str = "singlestream",
    streams: int = 4,
    warmup: int = 10,
    iterations: int | None = 100,
    duration_s: float | None = None,
) -> list[BenchConfig]:
    """Every combination of candidate × batch × threads, validated before anything runs."""
    check_timing(scenario, streams, warmup, iterations, duration_s)
    return [
        BenchConfig(
            backend=candidate.backend,
            device=candidate.device,
            batch=batch,
            threads=thread_count,
            precision=candidate.precision,
            scenario=scenario,
            streams=streams if scenario == "multistream" else 1,
            warmup=warmup,
            iterations=None if duration_s else iterations,
            duration_s=duration_s,
            options=dict(candidate.options),
        )
        for candidate in candidates
        for batch in batches
        for thread_count in threads
    ]


def rebatch(feeds: Mapping[str, np.ndarray], axes: Mapping[str, int | None], batch: int) -> dict[str, np.ndarray]:
    """Given arrays tiled or cut along their batch axes to another batch size (other inputs as given)."""
    out = {}
    for name, array in feeds.items():
        axis = axes.get(name)
        if axis is not None and array.ndim > axis and array.shape[axis] != batch:
            repeats = -(-batch // array.shape[axis])
            array = np.take(np.concatenate([array] * repeats, axis=axis), range(batch), axis=axis)
        out[name] = array
    return out


def measure_isolated(
    model: Path,
    config: BenchConfig,
    inputs_path: Path,
    outputs_path: Path,
    checks: Sequence[Path],
    cost_per_hour: float | None,
    timeout_s: float,
) -> tuple[Row, dict[str, np.ndarray] | None, list[dict[str, np.ndarray]]]:
    """One configuration measured in its own worker (``deploykit.bench.worker``): its row, its first
    run's outputs and its outputs on the check cases (``optimize`` measures its rounds with it too)."""
    job = {
        "model": str(model),
        "config": config.to_dict(),
        "inputs": str(inputs_path),
        "outputs": str(outputs_path),
        "check_cases": [str(c) for c in checks],
        "cost_per_hour": cost_per_hour,
    }
    outcome = run_worker("deploykit.bench.worker", job, timeout_s=timeout_s + (config.duration_s or 0))
    if outcome.result is None:
        return Row.from_failure(config, outcome.error or "the isolated run gave no result"), None, []
    row = Row.from_dict(outcome.result)
    if not row.ok or not outputs_path.exists():
        return row, None, []
    checked = [read_arrays(f"{outputs_path}.check-{i}.npz") for i in range(len(checks))]
    return row, read_arrays(outputs_path), checked


def measure_resident(
    worker: ResidentWorker, model: Path, config: BenchConfig, inputs_path: Path, outputs_path: Path, timeout_s: float
) -> Row:
    """One more measurement of the configuration a resident worker holds open (``bench.worker``'s resident
    mode): its row; a worker that failed or died gives the failure's row, and is not asked again."""
    job: dict[str, object] = {
        "model": str(model),
        "config": config.to_dict(),
        "inputs": str(inputs_path),
        "outputs": str(outputs_path),
        "check_cases": [],
        "cost_per_hour": None,
    }
    outcome = worker.ask(job, timeout_s + (config.duration_s or 0))
    if outcome.result is None:
        return Row.from_failure(config, outcome.error or "the resident worker gave no result")
    return Row.from_dict(outcome.result)


# The keywords of 0.1's benchmark, now fields of the BenchPlan it takes.
_LEGACY = (
    MovedKeywords(
        "plan",
        (
            "backends",
            "batch",
            "threads",
            "precision",
            "scenario",
            "streams",
            "warmup",
            "iterations",
            "duration_s",
            "shapes",
            "batch_axes",
            "seed",
            "oracle",
            "isolate",
            "cost_per_hour",
            "options",
            "thresholds",
            "max_drop",
            "timeout_s",
        ),
    ),
)


def benchmark(
    model: Model | str | os.PathLike[str],
    plan: BenchPlan | None = None,
    *,
    inputs: str | os.PathLike[str] | Mapping[str, np.ndarray] | None = None,
    progress: Progress | None = None,
    **legacy: object,
) -> BenchmarkReport:
    """Benchmark a model on several backends/devices/precisions with the same inputs, and verify each.

    Args:
        model: the ``.onnx`` file, or its ``Model`` (``deploykit.model.Model.open``): it is read once.
        plan: what to measure and how (``BenchPlan``: backends, batch and threads sweeps,
            precisions, scenario, iterations, oracle, thresholds, ``max_drop`` …); default
            ``BenchPlan()``: every available backend × device, 100 timed runs each.
        inputs: an ``.npz`` file, a dict of arrays, or an image / folder of images (then reduced
            precision is also judged by the task metric on up to 8 of the images); default
            seeded random data shaped by the plan's ``shapes``/``batch_axes``/the model's metadata.
        progress: called as ``progress(done, total, label)``.
        **legacy: the keywords of 0.1 (``backends``, ``batch``, ``threads``, ``precision``, ``scenario``,
            ``streams``, ``warmup``, ``iterations``, ``duration_s``, ``shapes``, ``batch_axes``, ``seed``,
            ``oracle``, ``isolate``, ``cost_per_hour``, ``options``, ``thresholds``, ``max_drop``,
            ``timeout_s``), and 0.1's list of backends in ``plan``'s place: still taken in this release,
            with a ``DeprecationWarning`` naming ``plan=BenchPlan(...)``.

    With ``plan.max_drop`` the recommendation is the fastest configuration whose measured accuracy
    delta (1 − top-1 agreement or mAP@0.5 against the f32 model, on real images; 0 for f32) stays
    within it; without it, any verified configuration.

    Example:
        ``deploykit.benchmark("model.onnx", BenchPlan(backends=("ort", "openvino"), iterations=200))``
    """
    if plan is not None and not isinstance(plan, BenchPlan):  # 0.1: benchmark(model, ["ort", "openvino"])
        legacy = {"backends": plan, **legacy}
        plan = None
    plan = fold_keywords("benchmark", legacy, {"plan": plan or BenchPlan()}, _LEGACY)["plan"]
    interface = as_model(model)
    started_sha256 = interface.sha256  # every worker must have timed this file, not a replacement
    candidates, notes = expand_candidates(
        plan.backends, parse_precisions(plan.precision), model_precision=interface.precision, options=plan.options
    )
    if not candidates:
        raise ResourceError(  # the command is sound; this machine runs none of it
            f"bench | nothing to run: {'; '.join(notes) or 'no backend is available'}.",
            hint="'deploykit backends' lists what runs here; f32 runs everywhere.",
        )
    feeds = resolve_inputs(interface, plan, inputs)
    configs = expand_configs(
        candidates,
        batches=feeds.batches,
        threads=[None] if plan.threads is None else list(plan.threads),
        scenario=plan.scenario,
        streams=plan.streams,
        warmup=plan.warmup,
        iterations=plan.iterations,
        duration_s=plan.duration_s,
    )
    runs = measure_all(interface, plan, configs, feeds, progress)
    notes += judge_measured(interface, plan, configs, feeds, runs)
    return assemble_report(interface, plan, started_sha256, feeds, runs.rows, notes)


@dataclass(frozen=True)
class BenchInputs:
    """What every configuration of one ``benchmark`` is fed: the same arrays for every backend.

    Attributes:
        batches: the batch sizes to measure (the plan's, else the given arrays' own).
        feeds_by_batch: the inputs of each batch size.
        checks: the real images' cases the verification also runs (an image source only).
        image_source: the inputs were an image or a folder of images.
        kind: ``images``, ``file`` or ``seeded random``, as the report's settings name it.
    """

    batches: list[int]
    feeds_by_batch: dict[int, dict[str, np.ndarray]]
    checks: list[dict[str, np.ndarray]]
    image_source: bool
    kind: str


def resolve_inputs(
    interface: Model, plan: BenchPlan, inputs: str | os.PathLike[str] | Mapping[str, np.ndarray] | None
) -> BenchInputs:
    """The arrays a benchmark feeds: an ``.npz`` file or a dict (checked against the model), images (resized
    and normalised as the model's metadata says, with up to ``IMAGE_CHECK_LIMIT`` real cases for the task
    metric), or seeded random data shaped by the plan's ``shapes``/``batch_axes`` and the model's metadata."""
    from deploykit.vision.image import IMAGE_SUFFIXES, image_cases, image_feeds

    settings, batch_axes = dict(plan.shapes), dict(plan.batch_axes)
    axes = {s.name: batch_axis_of(s, set(), batch_axes) for s in interface.inputs}
    image_source = isinstance(inputs, (str, os.PathLike)) and (
        Path(inputs).is_dir() or Path(inputs).suffix.lower() in IMAGE_SUFFIXES
    )
    given: dict[str, np.ndarray] | None = None
    if isinstance(inputs, (str, os.PathLike)) and not image_source:
        given = check_given_inputs(interface.input_specs(), load_arrays(inputs))
    elif isinstance(inputs, Mapping):
        given = check_given_inputs(interface.input_specs(), {k: np.asarray(v) for k, v in inputs.items()})
    batch = plan.batch
    if batch is None and given is not None:
        batch = (fed_batch(given, axes),)
    first_batch = None if batch is None else batch[0]

    def feeds_for(size: int | None) -> dict[str, np.ndarray]:
        if image_source:
            return image_feeds(interface, inputs, size or 1)  # type: ignore[arg-type]
        if given is not None:
            return rebatch(given, axes, size) if size else given
        return make_inputs(
            interface.inputs,
            seed=plan.seed,
            metadata=interface.metadata_props,
            batch=size,
            settings=settings,
            batch_axes=batch_axes,
            model_name=f"'{interface.path.name}'",
        )

    first_feeds = feeds_for(first_batch)
    batches = [fed_batch(first_feeds, axes)] if batch is None else list(batch)
    feeds_by_batch = {b: first_feeds if b == batches[0] else feeds_for(b) for b in batches}
    checks: list[dict[str, np.ndarray]] = []
    if image_source:
        size = next((v.shape for v in settings.values() if v.shape and len(v.shape) == 4), None)
        checks, _ = image_cases(interface, inputs, IMAGE_CHECK_LIMIT, (size[2], size[3]) if size else None)  # type: ignore[arg-type]
    kind = "images" if image_source else ("file" if given is not None else "seeded random")
    return BenchInputs(batches, feeds_by_batch, checks, image_source, kind)


@dataclass
class MeasuredRuns:
    """Each configuration's row, its first run's outputs and its outputs on the check cases (same order)."""

    rows: list[Row] = field(default_factory=list)
    outputs: list[dict[str, np.ndarray] | None] = field(default_factory=list)
    checked: list[list[dict[str, np.ndarray]]] = field(default_factory=list)


def measure_all(
    interface: Model, plan: BenchPlan, configs: Sequence[BenchConfig], feeds: BenchInputs, progress: Progress | None
) -> MeasuredRuns:
    """Every configuration measured once (in its own worker unless ``plan.isolate`` is off), then
    ``plan.rounds - 1`` more interleaved rounds, all under the plan's background load."""
    runs = MeasuredRuns()
    with tempfile.TemporaryDirectory(prefix="deploykit-bench-") as scratch_dir:
        staged = _stage(Path(scratch_dir), feeds)
        with background_load(BackgroundLoad(plan.background_load)):  # every timed run under the same load
            for index, config in enumerate(configs):
                if progress:
                    progress(index, len(configs), config.label())
                row, outputs, checked = _measure_first(interface, plan, config, index, feeds, staged)
                runs.rows.append(row)
                runs.outputs.append(outputs)
                runs.checked.append(checked)
            _more_rounds(runs.rows, interface, plan, feeds, staged)
        if progress:
            progress(len(configs), len(configs), "verifying")
    return runs


@dataclass(frozen=True)
class _Staged:
    """The inputs written once into a benchmark's scratch folder, where every worker reads them."""

    scratch: Path
    inputs_by_batch: dict[int, Path]
    checks: list[Path]


def _stage(scratch: Path, feeds: BenchInputs) -> _Staged:
    inputs_by_batch = {b: scratch / f"inputs-b{b}.npz" for b in feeds.feeds_by_batch}
    for b, arrays in feeds.feeds_by_batch.items():
        write_arrays(inputs_by_batch[b], arrays)
    checks = [scratch / f"check-{index}.npz" for index in range(len(feeds.checks))]
    for path, case in zip(checks, feeds.checks, strict=True):
        write_arrays(path, case)
    return _Staged(scratch, inputs_by_batch, checks)


def _measure_first(
    interface: Model, plan: BenchPlan, config: BenchConfig, index: int, feeds: BenchInputs, staged: _Staged
) -> tuple[Row, dict[str, np.ndarray] | None, list[dict[str, np.ndarray]]]:
    """A configuration's first measurement: its row, its outputs and its outputs on the check cases."""
    if plan.isolate:
        return measure_isolated(
            interface.path,
            config,
            staged.inputs_by_batch[config.batch],
            staged.scratch / f"outputs-{index}.npz",
            staged.checks,
            plan.cost_per_hour,
            plan.timeout_s,
        )
    try:
        return measure(
            interface,
            config,
            feeds.feeds_by_batch[config.batch],
            cost_per_hour=plan.cost_per_hour,
            check_cases=feeds.checks,
        )
    except DeployKitError as exc:
        return Row.from_failure(config, exc), None, []


def _more_rounds(rows: list[Row], interface: Model, plan: BenchPlan, feeds: BenchInputs, staged: _Staged) -> None:
    """Rounds 2 to ``plan.rounds``; isolated rounds run in each configuration's resident worker (started at
    its first extra round), and no resident worker outlives them: decided, failed or interrupted."""
    residents: dict[int, ResidentWorker] = {}
    try:
        for number in range(2, plan.rounds + 1):
            _another_round(rows, number, interface, plan, feeds, staged, residents)
    finally:
        for worker in residents.values():
            worker.close()


def _another_round(
    rows: list[Row],
    number: int,
    interface: Model,
    plan: BenchPlan,
    feeds: BenchInputs,
    staged: _Staged,
    residents: dict[int, ResidentWorker],
) -> None:
    """One more measurement of every configuration that ran, in a rotated order (interleaved with the
    others, so a slow minute of the machine falls on all of them); its blocks join the row's. A
    configuration that fails in a later round loses its row to the failure."""
    ok = [index for index, row in enumerate(rows) if row.ok]
    shift = number % len(ok) if ok else 0
    for index in ok[shift:] + ok[:shift]:
        config = rows[index].config
        if plan.isolate:
            worker = residents.get(index)
            if worker is None:
                worker = residents[index] = ResidentWorker("deploykit.bench.worker", config.label())
            again = measure_resident(
                worker,
                interface.path,
                config,
                staged.inputs_by_batch[config.batch],
                staged.scratch / f"outputs-{index}-round{number}.npz",
                plan.timeout_s,
            )
        else:
            try:
                again, _, _ = measure(
                    interface, config, feeds.feeds_by_batch[config.batch], cost_per_hour=plan.cost_per_hour
                )
            except DeployKitError as exc:
                again = Row.from_failure(config, exc)
        if again.ok:
            rows[index].add_round(again)
        else:
            rows[index] = again


def judge_measured(
    interface: Model, plan: BenchPlan, configs: Sequence[BenchConfig], feeds: BenchInputs, runs: MeasuredRuns
) -> list[str]:
    """Each row's verdict against the oracle (per batch size, or on the real images with the task metric);
    returns the notes on how it was judged."""
    notes: list[str] = []
    task = None
    if feeds.image_source:
        from deploykit.tasks.registry import recognise

        task = recognise(interface.output_specs(), interface.metadata_props)
    for members, cases in _judged_together(configs, feeds):
        # every image: the task metric of every row is measured against the oracle
        info, references = run_oracle(
            interface,
            plan.oracle,
            cases,
            timeout_s=plan.timeout_s,
            isolate=plan.isolate,
            memory_bytes=plan.oracle_memory_bytes,
        )
        candidates = [_candidate(runs, configs[i], i, feeds.image_source) for i in members]
        if references is None:
            first = next((run for run, _ in candidates if run.ok), None)
            if first is not None:
                detail = f"{info.detail}; " if info.detail else ""
                info = OracleInfo(first.label, False, detail + f"configurations compared with {first.label}")
                references = first.outputs
        if info.detail:
            notes.append(f"oracle: {info.detail}")
        verdicts = judge_runs(candidates, cases, references, info, overrides=plan.thresholds.to_dict(), task=task)
        for i, verdict in zip(members, verdicts, strict=True):
            if runs.rows[i].ok:
                runs.rows[i].set_verdict(verdict)
    if feeds.image_source and task is None:
        notes.append("no task metric: the model is neither a classifier nor a detector deploykit recognises")
    return notes


def _judged_together(
    configs: Sequence[BenchConfig], feeds: BenchInputs
) -> list[tuple[list[int], list[dict[str, np.ndarray]]]]:
    """The rows judged against one oracle run, with its cases: all of them on the real images, else the
    rows of each batch size (once, however often the sweep names it) on that batch's inputs."""
    if feeds.image_source:
        return [(list(range(len(configs))), feeds.checks)]
    return [
        ([i for i, c in enumerate(configs) if c.batch == b], [feeds.feeds_by_batch[b]])
        for b in dict.fromkeys(feeds.batches)
    ]


def _candidate(
    runs: MeasuredRuns, config: BenchConfig, index: int, image_source: bool
) -> tuple[CandidateRun, str | None]:
    """One row's outputs as verification judges them (with its precision), or the reason it has none."""
    row = runs.rows[index]
    first_outputs = runs.outputs[index]
    produced = runs.checked[index] if image_source else ([first_outputs] if first_outputs is not None else [])
    error = None if row.ok and produced else (row.error or "no outputs")
    ran = row.session
    run = CandidateRun(config.label(), None if ran is None else ran.to_dict(), produced, error, hint=row.hint)
    return run, config.precision


def assemble_report(
    interface: Model, plan: BenchPlan, started_sha256: str, feeds: BenchInputs, rows: list[Row], notes: list[str]
) -> BenchmarkReport:
    """The report of the measured and judged rows, ranked (``judging.judge``), once the model file is
    known to be the one measured from start to end."""
    model_path = interface.path
    final_sha256 = file_sha256(model_path)
    if final_sha256 != started_sha256:
        raise ModelError(
            f"model '{model_path.name}' | changed while the benchmark ran (SHA-256 {started_sha256[:12]}… at the "
            f"start, {final_sha256[:12]}… at the end): its rows would mix two models, so there is no report.",
            hint="leave the model file alone while deploykit measures it (write a new one elsewhere), then run again.",
        )
    result = BenchmarkReport(
        model=ModelInfo(str(model_path), final_sha256, list(interface.inputs), list(interface.outputs)),
        settings=BenchSettings(
            scenario=plan.scenario,
            warmup=plan.warmup,
            iterations=None if plan.duration_s else plan.iterations,
            duration_s=plan.duration_s,
            seed=plan.seed,
            isolated=plan.isolate,
            cost_per_hour=plan.cost_per_hour,
            inputs=feeds.kind,
            max_drop=plan.max_drop,
            background_load=BackgroundLoad(plan.background_load).to_dict(),
            rounds=plan.rounds,
        ),
        device=fingerprint(),
        rows=rows,
        notes=list(dict.fromkeys(notes)),
    )
    judging.judge(result)
    if plan.max_drop is not None and result.recommendation is None:
        result.notes.append(
            f"no configuration stays within --max-drop {plan.max_drop:.1%}: reduced precision needs --inputs photos/ "
            "for a measured accuracy delta"
        )
    return result
