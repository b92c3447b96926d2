"""End-to-end benchmarks of a task pipeline (pre-processing + inference + post-processing) on real
images: latency as an app experiences it, split by stage, on each backend, in one report.
"""

from __future__ import annotations

import copy
import os
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from deploykit.backends.registry import canonical_name, get_backend
from deploykit.bench import judging
from deploykit.bench.config import BenchConfig
from deploykit.bench.fingerprint import fingerprint
from deploykit.bench.load import BackgroundLoad, background_load
from deploykit.bench.measure import _peak_rss_bytes, blocks_of
from deploykit.bench.plan import BenchPlan
from deploykit.bench.report import BenchmarkReport
from deploykit.bench.rows import BenchSettings, ModelInfo, Row
from deploykit.bench.stats import latency_stats
from deploykit.errors import DeployKitError, ResourceError, UsageError
from deploykit.io import file_sha256
from deploykit.tasks.base import Task
from deploykit.tasks.registry import pipeline_tasks, task_class
from deploykit.verify.check import default_backend_specs, expand_candidates, parse_backend_spec, parse_precisions
from deploykit.verify.verdict import OracleInfo, Status, Verdict
from deploykit.vision.image import IMAGE_SUFFIXES, list_images, load_image


def _images(folder: str | os.PathLike[str]) -> list[Path]:
    path = Path(folder)
    files = list_images(path) if path.is_dir() else []
    if not files:
        raise UsageError(
            f"images '{path}' | {'is not a directory' if not path.is_dir() else 'holds no image files'}.",
            hint=f"pass a folder of {', '.join(IMAGE_SUFFIXES)} files.",
        )
    return files


def _agreement(task: type[Task], results: list[Any], reference: list[Any]) -> tuple[bool, float]:
    """The share of images whose pipeline results are the task's same answer (``Task.results_agree``)."""
    agreeing = sum(task.results_agree(ours, theirs) for ours, theirs in zip(results, reference, strict=True))
    share = agreeing / len(results)
    return share == 1.0, share


def _configs(model: str | os.PathLike[str], plan: BenchPlan) -> tuple[list[BenchConfig], list[str]]:
    """The plan's backends × precisions × threads, as plain ``bench`` expands them (one image per call:
    batch 1 only)."""
    from deploykit.bench.runner import expand_configs
    from deploykit.model import as_model

    if plan.batch not in (None, (1,)):
        raise UsageError(
            f"--batch {','.join(str(b) for b in plan.batch or ())} | a pipeline times one image per call (batch 1).",
            hint="drop --batch with --pipeline, or bench the model itself for batched inference.",
        )
    candidates, notes = expand_candidates(
        plan.backends or default_backend_specs(),
        parse_precisions(plan.precision),
        model_precision=as_model(model).precision,
        options=plan.options,
    )
    if not candidates:
        raise ResourceError(  # the command is sound; this machine runs none of it
            f"bench --pipeline | nothing to run: {'; '.join(notes) or 'no backend'}.",
            hint="'deploykit backends' lists what runs here.",
        )
    configs = expand_configs(
        candidates, threads=list(plan.threads or (None,)), warmup=plan.warmup, iterations=plan.iterations or 20
    )
    return configs, notes


def _time(pipeline: Any, loaded: list[Any], config: BenchConfig) -> tuple[list[int], list[Any], float]:
    for _ in range(config.warmup):
        pipeline(loaded[0])
    samples, stages = [], []
    wall = time.perf_counter()
    for index in range(config.iterations or 1):
        image = loaded[index % len(loaded)]
        start = time.perf_counter_ns()
        pipeline(image)
        samples.append(time.perf_counter_ns() - start)
        stages.append(pipeline.last_timing)
    return samples, stages, time.perf_counter() - wall


def _oracle_results(
    model: str | os.PathLike[str], pipeline_class: Any, oracle: str, loaded: list[Any]
) -> tuple[OracleInfo, list[Any]] | None:
    """The reference results of a named ``--oracle`` (its f32 pipeline on every image), or None for
    ``auto`` (the first row is the reference) and ``none``."""
    from deploykit.backends.registry import REFERENCE_BACKEND

    if oracle in ("auto", "none"):
        return None
    name, device = parse_backend_spec(oracle)
    name = canonical_name(name)
    backend = get_backend(name)
    with pipeline_class(model, name, device or backend.default_device, **backend.precision_options("f32")) as ran:
        results = [ran(image) for image in loaded]
    independent = name == REFERENCE_BACKEND
    return OracleInfo(oracle, independent, f"the pipeline on {oracle} (f32) over {len(loaded)} images"), results


def benchmark_pipeline(
    model: str | os.PathLike[str],
    task: str,
    images: str | os.PathLike[str],
    backends: Sequence[str] | None = None,
    *,
    plan: BenchPlan | None = None,
    iterations: int = 20,
    warmup: int = 2,
    options: dict[str, Any] | None = None,
) -> BenchmarkReport:
    """Time ``Detector``/``Classifier`` calls over every image in a folder, for every configuration
    plain ``bench`` would measure: ``plan``'s backends and devices × ``precision`` × ``threads``,
    with its backend ``options``, ``warmup``/``iterations`` and ``oracle`` (``auto``: the first
    configuration is the reference, every verdict unverified; a backend spec: that backend's f32
    pipeline is, and the reference backend's verdicts pass or fail; ``none``: no verdicts).
    Without ``plan``: ``backends``, ``iterations``, ``warmup`` and ``options``.
    """
    if plan is None:
        plan = BenchPlan(
            backends=tuple(backends) if backends else None,
            warmup=warmup,
            iterations=iterations,
            options=dict(options or {}),
            isolate=False,
        )
    tasks = pipeline_tasks()
    if task not in tasks:
        raise UsageError(f"pipeline '{task}' | is not one of {', '.join(tasks)}.", hint="e.g. --pipeline detect.")
    if plan.iterations is not None and plan.iterations < 1:
        raise UsageError(f"iterations {plan.iterations} | at least 1 is needed.", hint="use --iterations 20.")
    files = _images(images)
    loaded = [load_image(f) for f in files]
    task_kind = task_class(task)
    pipeline_class = task_kind.pipeline_class()
    configs, notes = _configs(model, plan)
    rows: list[Row] = []
    outputs: list[list[Any] | None] = []
    with background_load(BackgroundLoad(plan.background_load)):
        for config in configs:
            try:
                start = time.perf_counter_ns()
                pipeline = pipeline_class(model, config.backend, config.device, **config.session_options())
                load_ms = (time.perf_counter_ns() - start) / 1e6
            except DeployKitError as exc:
                rows.append(Row.from_failure(config, exc))
                outputs.append(None)
                continue
            with pipeline:
                start = time.perf_counter_ns()
                first = [pipeline(image) for image in loaded[:1]]
                first_ms = (time.perf_counter_ns() - start) / 1e6
                samples, stages, wall = _time(pipeline, loaded, config)
                results = first + [pipeline(image) for image in loaded[1:]]
                info = copy.deepcopy(pipeline.session.info)
            stages_p50 = {
                f"{stage}_p50_ms": statistics.median(getattr(t, f"{stage}_ms") for t in stages)
                for stage in ("pre", "infer", "post")
            }
            rows.append(
                Row(
                    config,
                    "ok",
                    session=info,
                    load_ms=load_ms,
                    first_inference_ms=first_ms,
                    latency=latency_stats(samples),
                    wall_s=wall,
                    throughput_sps=len(samples) / wall,
                    peak_rss_bytes=_peak_rss_bytes(),
                    stages=stages_p50,
                    blocks=blocks_of(samples, 1),
                )
            )
            outputs.append(results)
    _judge(
        task,
        task_kind,
        rows,
        outputs,
        _oracle_results(model, pipeline_class, plan.oracle, loaded),
        len(files),
        plan.oracle,
    )
    result = BenchmarkReport(
        model=ModelInfo(str(model), file_sha256(model)),
        settings=BenchSettings(
            warmup=plan.warmup,
            iterations=plan.iterations,
            isolated=False,
            inputs="file",
            pipeline=task,
            images=[str(f) for f in files],
            background_load=BackgroundLoad(plan.background_load).to_dict(),
        ),
        device=fingerprint(),
        rows=rows,
        notes=notes,
    )
    judging.judge(result)
    return result


def _judge(
    task: str,
    task_kind: type[Task],
    rows: list[Row],
    outputs: list[list[Any] | None],
    oracle: tuple[OracleInfo, list[Any]] | None,
    images: int,
    oracle_name: str,
) -> None:
    """Each row's verdict: its results against the named oracle's, or against the first row's."""
    if oracle_name == "none":
        return
    reference_index = next((i for i, o in enumerate(outputs) if o is not None), None)
    if reference_index is None:
        return
    if oracle is None:
        label = rows[reference_index].label
        info = OracleInfo(label, False, f"{task} results on {images} images compared across backends")
        reference = outputs[reference_index]
    else:
        info, reference = oracle
        label = info.name
    for index, (row, produced) in enumerate(zip(rows, outputs, strict=True)):
        if produced is None:
            continue
        precision = row.session.precision if row.session else None
        if oracle is None and index == reference_index:
            row.verdict = Verdict(
                label,
                "unverified",
                info,
                precision=precision,
                rule=f"{task} agreement",
                agreement=True,
                reason="the reference of the comparison",
            )
            continue
        passed, share = _agreement(task_kind, produced, reference)  # type: ignore[arg-type]
        status: Status = ("pass" if passed else "fail") if info.independent else "unverified"
        reason = f"{share:.0%} of the {task} results agree with {label}"
        row.verdict = Verdict(
            row.label, status, info, precision=precision, rule=f"{task} agreement", agreement=passed, reason=reason
        )
