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
from deploykit.bench.measure import _peak_rss_bytes
from deploykit.bench.report import BenchmarkReport
from deploykit.bench.rows import BenchSettings, ModelInfo, Row
from deploykit.bench.stats import latency_stats
from deploykit.errors import DeployKitError, UsageError
from deploykit.io import file_sha256
from deploykit.tasks.base import Task
from deploykit.tasks.registry import pipeline_tasks, task_class
from deploykit.verify.check import parse_backend_spec
from deploykit.verify.verdict import OracleInfo, Verdict
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


def benchmark_pipeline(
    model: str | os.PathLike[str],
    task: str,
    images: str | os.PathLike[str],
    backends: Sequence[str],
    *,
    iterations: int = 20,
    warmup: int = 2,
    options: dict[str, Any] | None = None,
) -> BenchmarkReport:
    """Time ``Detector``/``Classifier`` calls over every image in a folder, on each backend."""
    tasks = pipeline_tasks()
    if task not in tasks:
        raise UsageError(f"pipeline '{task}' | is not one of {', '.join(tasks)}.", hint="e.g. --pipeline detect.")
    if iterations < 1:
        raise UsageError(f"iterations {iterations} | at least 1 is needed.", hint="use --iterations 20.")
    files = _images(images)
    loaded = [load_image(f) for f in files]
    task_kind = task_class(task)
    pipeline_class = task_kind.pipeline_class()
    rows: list[Row] = []
    outputs: list[list[Any] | None] = []
    for spec in backends:
        name, device = parse_backend_spec(spec)
        name = canonical_name(name)
        device = device or get_backend(name).default_device
        config = BenchConfig(name, device, batch=1, iterations=iterations, warmup=warmup, options=dict(options or {}))
        try:
            start = time.perf_counter_ns()
            pipeline = pipeline_class(model, name, device, **(options or {}))
            load_ms = (time.perf_counter_ns() - start) / 1e6
        except DeployKitError as exc:
            rows.append(Row.from_failure(config, exc))
            outputs.append(None)
            continue
        with pipeline:
            start = time.perf_counter_ns()
            first = [pipeline(image) for image in loaded[:1]]
            first_ms = (time.perf_counter_ns() - start) / 1e6
            for _ in range(warmup):
                pipeline(loaded[0])
            samples, stages = [], []
            wall = time.perf_counter()
            for index in range(iterations):
                image = loaded[index % len(loaded)]
                start = time.perf_counter_ns()
                pipeline(image)
                samples.append(time.perf_counter_ns() - start)
                stages.append(pipeline.last_timing)
            wall = time.perf_counter() - wall
            results = first + [pipeline(image) for image in loaded[1:]]
            info = copy.deepcopy(pipeline.session.info)
        stages_p50 = {f"{stage}_p50_ms": statistics.median(getattr(t, f"{stage}_ms") for t in stages)
                      for stage in ("pre", "infer", "post")}  # fmt: skip
        rows.append(Row(config, "ok", session=info, load_ms=load_ms, first_inference_ms=first_ms,
                        latency=latency_stats(samples), wall_s=wall, throughput_sps=len(samples) / wall,
                        peak_rss_bytes=_peak_rss_bytes(), stages=stages_p50))  # fmt: skip
        outputs.append(results)
    reference_index = next((i for i, o in enumerate(outputs) if o is not None), None)
    for index, (row, produced) in enumerate(zip(rows, outputs, strict=True)):
        if produced is None or reference_index is None:
            continue
        reference_label = rows[reference_index].label
        oracle = OracleInfo(reference_label, False, f"{task} results on {len(files)} images compared across backends")
        precision = row.session.precision if row.session else None
        if index == reference_index:
            verdict = Verdict(reference_label, "unverified", oracle, precision=precision, rule=f"{task} agreement",
                              agreement=True, reason="the reference of the comparison")  # fmt: skip
        else:
            passed, share = _agreement(task_kind, produced, outputs[reference_index])  # type: ignore[arg-type]
            verdict = Verdict(row.label, "unverified", oracle, precision=precision,
                              rule=f"{task} agreement", agreement=passed,
                              reason=f"{share:.0%} of the {task} results agree with {reference_label}")  # fmt: skip
        row.verdict = verdict
    result = BenchmarkReport(
        model=ModelInfo(str(model), file_sha256(model)),
        settings=BenchSettings(
            warmup=warmup,
            iterations=iterations,
            isolated=False,
            inputs="file",
            pipeline=task,
            images=[str(f) for f in files],
        ),
        device=fingerprint(),
        rows=rows,
    )
    judging.judge(result)
    return result
