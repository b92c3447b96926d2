"""``optimize``: the fastest configuration that still gives the right answer, searched within a time
budget and written as a bundle.

Order of work: validate everything (paths, images, options) → split the images (calibration /
accuracy, never both) → make the model variants (INT8 with the ORT and NNCF engines, FP16) with
``quantize`` → run the oracle → screen every candidate once, then successive halving (``rounds``)
→ rank what was measured (``answer``, with ``ranking.rank``) → write the bundle
(``bundle.write_bundle``). Ctrl-C during the search keeps the best so far, marked partial.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

from deploykit.bench.config import SCENARIOS
from deploykit.bench.load import BackgroundLoad, background_load
from deploykit.errors import InputError, ResourceError, UsageError
from deploykit.io import output_scope, scratch_dir
from deploykit.optimize.accuracy import AccuracyEvidenceWarning, budget_note
from deploykit.optimize.answer import answer
from deploykit.optimize.candidates import (
    ENGINES,
    batches_of,
    converted_variants,
    expand,
    ground_truth,
    link_folder,
    make_variants,
    runs_f16,
    search_specs,
    split_images,
    thread_counts,
)
from deploykit.optimize.plan import OptimizePlan
from deploykit.optimize.results import OptimizeReport, OptimizeSettings
from deploykit.optimize.rounds import (
    ROUNDS_SHARE,
    SCREEN_GRACE,
    SCREEN_GRACE_MIN_S,
    Progress,
    Search,
    SearchProgress,
)

DEFAULT_TIME_BUDGET_S = 300.0
DEFAULT_MAX_DROP = 0.01

__all__ = [
    "DEFAULT_MAX_DROP",
    "DEFAULT_TIME_BUDGET_S",
    "SearchProgress",
    "optimize",
    "parse_max_drop",
    "parse_time_budget",
]


def parse_time_budget(text: str | float | None) -> float:
    """``10m``, ``90s``, ``300`` (seconds) → seconds; None → the default (5 minutes)."""
    from deploykit.bench.config import parse_duration

    if text is None:
        return DEFAULT_TIME_BUDGET_S
    if isinstance(text, (int, float)):
        seconds = float(text)
        if not seconds > 0:
            raise UsageError(f"--time-budget {text} | must be positive.", hint="e.g. --time-budget 5m.")
        return seconds
    try:
        return parse_duration(text)
    except UsageError as exc:
        raise UsageError(
            f"--time-budget '{text}' | expected a positive duration such as 90s, 5m or 300.",
            hint="e.g. --time-budget 10m.",
        ) from exc


def parse_max_drop(value: str | float | None) -> float:
    """``1%`` → 0.01, ``0`` → 0 (f32 answers only); None → the default 1 %."""
    if value is None:
        return DEFAULT_MAX_DROP
    text = str(value).strip()
    try:
        number = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        number = float("nan")
    if not 0 <= number < 1:
        raise UsageError(
            f"--max-drop {value} | expected a share from 0 to 1 (or a percentage: 1%).",
            hint="--max-drop 1% allows the task metric to fall by one point; 0 keeps f32 answers.",
        )
    return number


@contextlib.contextmanager
def _working_folder(output: Path | None) -> Iterator[Path]:
    """Where the search keeps its variants and photo links: beside the bundle and named after it
    (``.deploykit-NAME.work-*``, ``io.scratch_dir``), so that what a killed run (SIGKILL, a power cut) left
    there is removed, with a warning, by the next run onto the same output; in TMPDIR without one."""
    if output is None:
        with tempfile.TemporaryDirectory(prefix="deploykit-optimize-") as folder:
            yield Path(folder)
        return
    with scratch_dir(output) as folder:
        yield folder


def _check_inputs(model: Path, images: Path | None, quantize: bool, output: Path | None, force: bool) -> None:
    if images is None and quantize:
        raise UsageError(
            "--images | INT8 needs calibration data: a folder of real images the model will see.",
            hint="pass --images photos/ (half calibrate, half measure the accuracy delta), or --no-quantize to "
            "search the float precisions only.",
        )
    if images is not None and images.suffix.lower() == ".npz" and images.is_file():
        raise InputError(
            f"--images '{images}' | is an .npz of arrays; optimize needs real images: every accuracy figure is "
            "the task metric (top-1 agreement, mAP@0.5) on held-out photos, never on the calibration half.",
            hint="pass --images photos/ (or photos/<class>/*.jpg); 'deploykit quantize MODEL --calibrate "
            f"{images.name} -o model.int8.onnx' quantizes from arrays, and --no-quantize without --images "
            "searches the float precisions on random inputs.",
        )
    if images is not None and not images.is_dir():
        raise InputError(
            f"--images '{images}' | is not a folder" + (" (it does not exist)." if not images.exists() else "."),
            hint="pass a folder of images (or folder/<class>/*.jpg).",
        )
    if output is not None:
        from deploykit.optimize.manifest import check_bundle_output

        check_bundle_output(output, inputs=[p for p in (model, images) if p is not None], force=force)


@output_scope()  # the outputs it checks stay this run's until it returns
def optimize(
    model: str | os.PathLike[str],
    images: str | os.PathLike[str] | None = None,
    plan: OptimizePlan | None = None,
    *,
    output: str | os.PathLike[str] | None = None,
    force: bool = False,
    progress: Progress | None = None,
) -> OptimizeReport:
    """Search backend × device × precision × model variant × threads (× batch offline) for the
    fastest configuration that stays within the accuracy budget; write it as a bundle.

    Args:
        model: the float ``.onnx`` file.
        images: a folder of real images (``photos/`` or ``photos/<class>/``): half calibrate the INT8
            variants, the other half (never calibrated on) measures every accuracy figure.
        plan: what to search (``OptimizePlan``: ``max_drop`` "1%" by default, ``backends``,
            ``scenario``, ``time_budget`` "5m", ``quantize``, ``threads``, ``batches``, the INT8
            ``engines``, ``seed``, ``timeout_s`` per measurement, ``background_load`` busy threads);
            default ``OptimizePlan()``.
        output: the bundle folder to write (None: only the report is returned).
        force: replace a non-empty ``output`` folder that is a bundle.
        progress: called with a ``SearchProgress`` after every measurement.

    Example:
        ``optimize("m.onnx", "photos/", OptimizePlan(max_drop="2%", backends=("openvino",)), output="deploy/")``

    Raises:
        UsageError, InputError, OutputError: before any work, nothing written.
        ParityError: no f32 configuration of the float model passes verification (no bundle).
        KeyboardInterrupt: interrupted before any candidate was admissible (nothing written).
    """
    from deploykit.bench.fingerprint import fingerprint
    from deploykit.model import check_model_path, read_interface

    started = time.perf_counter()
    plan = plan or OptimizePlan()
    max_drop, backends, scenario, quantize, seed = plan.max_drop, plan.backends, plan.scenario, plan.quantize, plan.seed
    threads, batches, engines, timeout_s = plan.threads, plan.batches, plan.engines, plan.timeout_s
    model_path = check_model_path(model)
    images_path = None if images is None else Path(images)
    output_path = None if output is None else Path(output)
    if scenario not in ("singlestream", "offline"):
        known = ", ".join(s for s in SCENARIOS if s != "multistream")
        raise UsageError(
            f"--scenario '{scenario}' | is not one of {known}.",
            hint="singlestream ranks by p50 latency, offline by throughput.",
        )
    budget = parse_max_drop(max_drop)
    budget_s = parse_time_budget(plan.time_budget)
    _check_inputs(model_path, images_path, quantize, output_path, force)
    interface = read_interface(model_path)
    batch_list = batches_of(interface, scenario, batches)
    thread_list = sorted(set(threads)) if threads else thread_counts()
    if any(t < 1 for t in thread_list):
        raise UsageError(f"--threads {thread_list} | expected positive counts.", hint="e.g. --threads 1,2.")
    specs, notes = search_specs(backends)
    unknown = [e for e in engines if e not in ENGINES]
    if unknown or not engines:
        raise UsageError(
            f"--quantizer {','.join(engines)} | expected one or more of {', '.join(ENGINES)}.",
            hint="ort: ONNX Runtime static QDQ; nncf: OpenVINO's NNCF.",
        )
    with _working_folder(output_path) as scratch:
        search = Search(
            model_path,
            interface,
            scratch,
            scenario=scenario,
            max_drop=budget,
            deadline=started + budget_s,
            timeout_s=timeout_s,
            progress=progress,
        )
        calibration: list[tuple[Path, str | None]] = []
        accuracy: list[tuple[Path, str | None]] = []
        if images_path is not None:
            calibration, accuracy = split_images(images_path, quantize, seed)
            labels = search.pipeline["labels"] or []
            search.truth, note = ground_truth(accuracy, calibration, labels, search.task_name, images_path)
            notes += [note] if note else []
        evidence = budget_note(len(accuracy), budget) if images_path is not None and quantize else None
        if evidence:  # said before the search, not discovered in the report
            notes.append(evidence)
            warnings.warn(AccuracyEvidenceWarning(f"optimize | {evidence}"), stacklevel=2)
        search.prepare_inputs([path for path, _ in accuracy], seed)
        search.report("variants", 0, 1)
        calibration_dir = link_folder(scratch / "calibration", calibration) if calibration else None
        fp16 = any(runs_f16(spec) for spec in specs)
        (scratch / "variants").mkdir()
        variants, more = make_variants(
            model_path, scratch / "variants", calibration_dir, quantize=quantize, engines=engines, fp16=fp16, seed=seed
        )
        notes += more
        converted, more, failed = converted_variants(model_path, specs, quantize=quantize)
        variants += converted
        notes += more
        specs = [spec for spec in specs if spec not in failed]
        states, more = expand(
            variants, specs, scenario=scenario, threads=thread_list, batches=batch_list, busy=plan.background_load > 0
        )
        notes += more
        if not states:
            raise ResourceError(  # the command is sound; this machine runs none of it
                f"optimize '{model_path.name}' | no candidate to run: {'; '.join(notes) or 'no backend'}.",
                hint="'deploykit backends' lists what runs here.",
            )
        search.states = states
        search.grace_s = max(budget_s * SCREEN_GRACE, SCREEN_GRACE_MIN_S)
        search.variants_deadline = started + budget_s * (1 - ROUNDS_SHARE)
        search.run_oracle()
        partial = False
        load = BackgroundLoad(plan.background_load)
        try:
            with background_load(load):  # every timed round runs under it; the oracle and quantizing do not
                search.screen()
                search.halve()
        except KeyboardInterrupt:
            if not search.admissible():
                raise
            partial = True
            notes.append("interrupted (Ctrl-C): the best candidate so far, from fewer rounds than planned")
        report = answer(
            search,
            settings=OptimizeSettings(
                scenario,
                budget,
                budget_s,
                quantize,
                None if images_path is None else str(images_path),
                len(calibration),
                len(accuracy),
                tuple(specs),
                tuple(thread_list),
                tuple(batch_list),
                seed,
                tuple(str(path.relative_to(images_path)) for path, _ in accuracy) if images_path else (),
                load.to_dict(),
            ),
            classes=tuple(label or "" for _, label in accuracy) if search.truth is not None else (),
            variants=[v for v, _ in variants],
            partial=partial,
            notes=notes,
            started=started,
            device=fingerprint(),
        )
        if output_path is not None:
            from deploykit.optimize.manifest import write_bundle

            chosen = report.best
            source = next(path for variant, path in variants if variant.name == chosen.variant)
            write_bundle(output_path, report, source, search.pipeline, force=force)
    return report
