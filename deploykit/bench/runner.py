"""Run a benchmark: expand configurations (backend × device × precision × batch × threads),
measure each in its own worker process, and judge every configuration's outputs through the
verification subsystem (an independent oracle when one runs; the task metric on real images for
reduced precision), then pick the fastest verified configuration.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np

from deploykit.backends.options import OptionValue
from deploykit.bench.config import SCENARIOS, BenchConfig
from deploykit.bench.fingerprint import fingerprint
from deploykit.bench.measure import measure
from deploykit.bench.report import BenchmarkReport
from deploykit.bench.rows import BenchSettings, ModelInfo, Row
from deploykit.errors import DeployKitError, ModelError, UsageError
from deploykit.inputs import (
    InputSetting,
    batch_axis_of,
    fed_batch,
    load_arrays,
    make_inputs,
    read_arrays,
    save_arrays,
)
from deploykit.io import file_sha256
from deploykit.model import read_interface
from deploykit.verify.check import (
    Candidate,
    check_given_inputs,
    default_backend_specs,
    expand_candidates,
    judge_runs,
    parse_precisions,
    run_oracle,
)
from deploykit.verify.isolated import DEFAULT_TIMEOUT_S, CandidateRun, run_worker
from deploykit.verify.metrics import thresholds_for
from deploykit.verify.verdict import OracleInfo

Progress = Callable[[int, int, str], None]
IMAGE_CHECK_LIMIT = 8

__all__ = ["benchmark", "default_backend_specs", "expand_configs"]


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
    if scenario not in SCENARIOS:
        raise UsageError(
            f"scenario '{scenario}' | is not one of {', '.join(SCENARIOS)}.",
            hint="singlestream: one query at a time; offline: big batches; multistream: K streams.",
        )
    if duration_s is None and (iterations is None or iterations < 1):
        raise UsageError(
            f"iterations {iterations} | at least 1 timed iteration is needed.",
            hint="use --iterations 100 (or --duration 10s).",
        )
    if warmup < 0:
        raise UsageError(f"warmup {warmup} | cannot be negative.", hint="use --warmup 0 to skip it.")
    if scenario == "multistream" and streams < 1:
        raise UsageError(f"streams {streams} | at least 1 stream is needed.", hint="e.g. --streams 4.")
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
    model: Path, config: BenchConfig, inputs_path: Path, outputs_path: Path, checks: Sequence[Path],
    cost_per_hour: float | None, timeout_s: float,
) -> tuple[Row, dict[str, np.ndarray] | None, list[dict[str, np.ndarray]]]:  # fmt: skip
    """One configuration measured in its own worker (``deploykit.bench.worker``): its row, its first
    run's outputs and its outputs on the check cases (``optimize`` measures its rounds with it too)."""
    job = {"model": str(model), "config": config.to_dict(), "inputs": str(inputs_path), "outputs": str(outputs_path),
           "check_cases": [str(c) for c in checks], "cost_per_hour": cost_per_hour}  # fmt: skip
    outcome = run_worker("deploykit.bench.worker", job, timeout_s=timeout_s + (config.duration_s or 0))
    if outcome.result is None:
        return Row.from_failure(config, outcome.error or "the isolated run gave no result"), None, []
    row = Row.from_dict(outcome.result)
    if not row.ok or not outputs_path.exists():
        return row, None, []

    return row, read_arrays(outputs_path), [read_arrays(f"{outputs_path}.check-{i}.npz") for i in range(len(checks))]


def benchmark(
    model: str | os.PathLike[str],
    backends: Sequence[str] | None = None,
    *,
    batch: int | Sequence[int] | None = None,
    threads: int | Sequence[int] | None = None,
    precision: str | Sequence[str] | None = None,
    scenario: str = "singlestream",
    streams: int = 4,
    warmup: int = 10,
    iterations: int | None = 100,
    duration_s: float | None = None,
    inputs: str | os.PathLike[str] | Mapping[str, np.ndarray] | None = None,
    shapes: Mapping[str, Sequence[int] | InputSetting] | None = None,
    batch_axes: Mapping[str, int] | None = None,
    seed: int = 0,
    oracle: str = "auto",
    isolate: bool = True,
    cost_per_hour: float | None = None,
    options: Mapping[str, OptionValue] | None = None,
    thresholds: Mapping[str, float | None] | None = None,
    max_drop: float | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    progress: Progress | None = None,
) -> BenchmarkReport:
    """Benchmark a model on several backends/devices/precisions with the same inputs, and verify each.

    Args:
        model: the ``.onnx`` file.
        backends: ``BACKEND`` or ``BACKEND:DEVICE`` specs; default every available backend × device.
        batch: one size or a sweep; default the model's own (its fixed batch, or 1 if dynamic).
        threads: one count or a sweep; default the runtime's own.
        precision: one or several of f32, bf16, f16, int8 (a sweep axis); each backend runs those it
            can natively here and the report lists the rest as not supported. Default: each
            device's own default precision.
        scenario: ``singlestream`` (p90 is the headline), ``offline`` (throughput), or
            ``multistream`` (``streams`` concurrent queries on one session).
        warmup, iterations, duration_s: untimed runs, then a count or a duration of timed runs.
        inputs: an ``.npz`` file, a dict of arrays, or an image / folder of images (then reduced
            precision is also judged by the task metric on up to 8 of the images); default
            seeded random data shaped by ``shapes``/``batch_axes``/the model's metadata.
        oracle: ``auto`` (onnx's reference evaluator), ``none``, or a backend spec.
        isolate: measure each configuration in its own worker process.
        cost_per_hour: the device's price per hour, for cost per million inferences.
        options: extra backend options for every configuration.
        thresholds: overrides for the verdict thresholds (atol, rtol, min_cosine, min_snr_db,
            min_top1_agreement, min_map).
        max_drop: an accuracy budget (0.01 = 1 %): the recommendation is the fastest configuration
            whose measured accuracy delta (1 − top-1 agreement or mAP@0.5 against the f32 model, on
            real images; 0 for f32) stays within it. Default: any verified configuration.
        timeout_s: the most one configuration's worker may take.
        progress: called as ``progress(done, total, label)``.
    """
    from deploykit.vision.image import IMAGE_SUFFIXES, image_cases, image_feeds

    model_path = Path(model)
    interface = read_interface(model_path)
    started_sha256 = file_sha256(model_path)  # every worker must have timed this file, not a replacement
    overrides = dict(thresholds or {})
    thresholds_for("f32", **overrides)
    if max_drop is not None and not 0 <= max_drop <= 1:
        raise UsageError(f"--max-drop {max_drop:g} | expected a share from 0 to 1 (or a percentage: 1%).",
                         hint="e.g. --max-drop 1% (or 0.01).")  # fmt: skip
    if timeout_s <= 0:
        raise UsageError(f"--timeout {timeout_s:g} | must be positive.", hint="e.g. --timeout 300.")
    candidates, notes = expand_candidates(
        backends, parse_precisions(precision), model_precision=interface.precision, options=options
    )
    if not candidates:
        raise UsageError(f"bench | nothing to run: {'; '.join(notes) or 'no backend is available'}.",
                         hint="'deploykit backends' lists what runs here; f32 runs everywhere.")  # fmt: skip
    settings = {k: v if isinstance(v, InputSetting) else InputSetting(tuple(v)) for k, v in (shapes or {}).items()}
    axes = {s.name: batch_axis_of(s, set(), dict(batch_axes or {})) for s in interface.inputs}
    image_source = isinstance(inputs, (str, os.PathLike)) and (
        Path(inputs).is_dir() or Path(inputs).suffix.lower() in IMAGE_SUFFIXES
    )
    given: dict[str, np.ndarray] | None = None
    if isinstance(inputs, (str, os.PathLike)) and not image_source:
        given = check_given_inputs({s.name: s for s in interface.inputs}, load_arrays(inputs))
    elif isinstance(inputs, Mapping):
        given = check_given_inputs({s.name: s for s in interface.inputs}, {k: np.asarray(v) for k, v in inputs.items()})
    if batch is None:
        batch = fed_batch(given, axes) if given is not None else None
    first_batch = batch if isinstance(batch, int) or batch is None else next(iter(batch))

    def feeds_for(size: int | None) -> dict[str, np.ndarray]:
        if image_source:
            return image_feeds(model_path, inputs, size or 1)  # type: ignore[arg-type]
        if given is not None:
            return rebatch(given, axes, size) if size else given
        return make_inputs(interface.inputs, seed=seed, metadata=interface.metadata, batch=size, settings=settings,
                           batch_axes=batch_axes, model_name=f"'{model_path.name}'")  # fmt: skip

    first_feeds = feeds_for(first_batch)
    batches = [fed_batch(first_feeds, axes)] if batch is None or isinstance(batch, int) else list(batch)
    thread_counts: list[int | None] = [threads] if threads is None or isinstance(threads, int) else list(threads)
    configs = expand_configs(candidates, batches=batches, threads=thread_counts, scenario=scenario, streams=streams,
                             warmup=warmup, iterations=iterations, duration_s=duration_s)  # fmt: skip
    feeds_by_batch = {b: first_feeds if b == batches[0] else feeds_for(b) for b in batches}
    checks: list[dict[str, np.ndarray]] = []
    if image_source:
        size = next((v.shape for v in settings.values() if v.shape and len(v.shape) == 4), None)
        checks, _ = image_cases(model_path, inputs, IMAGE_CHECK_LIMIT, (size[2], size[3]) if size else None)  # type: ignore[arg-type]

    rows: list[Row] = []
    outputs_by_row: list[dict[str, np.ndarray] | None] = []
    checked_by_row: list[list[dict[str, np.ndarray]]] = []
    with tempfile.TemporaryDirectory(prefix="deploykit-bench-") as scratch_dir:
        scratch = Path(scratch_dir)
        inputs_paths, check_paths = {}, []
        for b, feeds in feeds_by_batch.items():
            inputs_paths[b] = scratch / f"inputs-b{b}.npz"
            save_arrays(inputs_paths[b], feeds)
        for index, case in enumerate(checks):
            check_paths.append(scratch / f"check-{index}.npz")
            save_arrays(check_paths[-1], case)
        for index, config in enumerate(configs):
            if progress:
                progress(index, len(configs), config.label())
            if isolate:
                row, outputs, checked = measure_isolated(model_path, config, inputs_paths[config.batch],
                                                          scratch / f"outputs-{index}.npz", check_paths,
                                                          cost_per_hour, timeout_s)  # fmt: skip
            else:
                try:
                    row, outputs, checked = measure(model_path, config, feeds_by_batch[config.batch],
                                                    cost_per_hour=cost_per_hour, check_cases=checks)  # fmt: skip
                except DeployKitError as exc:
                    row, outputs, checked = Row.from_failure(config, str(exc)), None, []
            rows.append(row)
            outputs_by_row.append(outputs)
            checked_by_row.append(checked)
        if progress:
            progress(len(configs), len(configs), "verifying")

    task = None
    if image_source:
        from deploykit.verify.task_metric import task_of

        task = task_of({s.name: s for s in interface.outputs}, interface.metadata)
        groups = {0: (list(range(len(rows))), checks)}
    else:
        groups = {b: ([i for i, c in enumerate(configs) if c.batch == b], [feeds_by_batch[b]]) for b in batches}
    for members, cases in groups.values():
        oracle_cases = cases  # every image: the task metric of every row is measured against the oracle
        info, references = run_oracle(model_path, oracle, oracle_cases, timeout_s=timeout_s, isolate=isolate)
        runs = []
        for i in members:
            first_outputs = outputs_by_row[i]
            produced = checked_by_row[i] if image_source else ([first_outputs] if first_outputs is not None else [])
            error = None if rows[i].ok and produced else (rows[i].error or "no outputs")
            ran = rows[i].session
            run = CandidateRun(configs[i].label(), None if ran is None else ran.to_dict(), produced, error)
            runs.append((run, configs[i].precision))
        if references is None:
            first = next((run for run, _ in runs if run.ok), None)
            if first is not None:
                detail = f"{info.detail}; " if info.detail else ""
                info = OracleInfo(first.label, False, detail + f"configurations compared with {first.label}")
                references = first.outputs
        if info.detail:
            notes.append(f"oracle: {info.detail}")
        verdicts = judge_runs(runs, cases, references, info, overrides=overrides, task=task,
                              metadata=interface.metadata)  # fmt: skip
        for i, verdict in zip(members, verdicts, strict=True):
            if rows[i].ok:
                rows[i].set_verdict(verdict)
    if image_source and task is None:
        notes.append("no task metric: the model is neither a classifier nor a detector deploykit recognises")

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
            scenario=scenario,
            warmup=warmup,
            iterations=None if duration_s else iterations,
            duration_s=duration_s,
            seed=seed,
            isolated=isolate,
            cost_per_hour=cost_per_hour,
            inputs="images" if image_source else ("file" if given is not None else "seeded random"),
            max_drop=max_drop,
        ),
        device=fingerprint(),
        rows=rows,
        notes=list(dict.fromkeys(notes)),
    )
    result.recommendation = result.recommend()
    if max_drop is not None and result.recommendation is None:
        result.notes.append(
            f"no configuration stays within --max-drop {max_drop:.1%}: reduced precision needs --inputs photos/ "
            "for a measured accuracy delta"
        )
    return result
