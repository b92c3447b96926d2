"""``optimize``: the fastest configuration that still gives the right answer, searched within a time
budget and written as a bundle.

Order of work: validate everything (paths, images, options) → split the images (calibration /
accuracy, never both) → make the model variants (INT8 with the ORT and NNCF engines, FP16) with
``quantize`` → run the oracle → screen every candidate once in its own bench worker (with the
held-out images, judged by the verification subsystem) → successive halving: rounds interleaved
across the survivors, dominated ones stop → rank the finalists (``ranking.rank``) → write the
bundle (``bundle.write_bundle``). Ctrl-C during the search keeps the best so far, marked partial.

Timing is bench's (``bench.runner.measure_isolated``); verdicts are verify's (``judge_run``).
"""

from __future__ import annotations

import dataclasses
import math
import os
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from deploykit.bench.config import SCENARIOS
from deploykit.bench.rows import ModelInfo, Row, accuracy_delta
from deploykit.errors import InputError, ParityError, UsageError
from deploykit.io import file_sha256
from deploykit.optimize.candidates import (
    ENGINES,
    SCREEN_DURATION_S,
    WARMUP,
    CandidateState,
    batches_of,
    expand,
    ground_truth,
    link_folder,
    make_variants,
    runs_f16,
    split_images,
    thread_counts,
)
from deploykit.optimize.ranking import Interval, Ranking, bootstrap_interval, rank
from deploykit.optimize.results import (
    Baseline,
    CandidateResult,
    CandidateStatus,
    GroundTruth,
    OptimizeReport,
    OptimizeSettings,
    RoundResult,
    Variant,
)
from deploykit.verify.verdict import OracleInfo

DEFAULT_TIME_BUDGET_S = 300.0
DEFAULT_MAX_DROP = 0.01
MAX_ROUNDS = 6
MIN_ROUNDS = 3  # the leader and its runner-up get at least this many rounds (time budget permitting)
ROUND_DURATION_S = 0.6
WORKER_TIMEOUT_S = 600.0
BASELINE_BACKEND = "onnxruntime"


@dataclass(frozen=True)
class SearchProgress:
    """Where the search is, for a progress bar.

    Attributes:
        stage: ``variants``, ``oracle``, ``screening``, ``round N`` or ``done``.
        done, total: measurements done and planned in this stage.
        alive: candidates still in the search.
        candidates: all candidates.
        label: what is being measured now.
        best: the best admissible candidate so far, with its headline estimate.
    """

    stage: str
    done: int
    total: int
    alive: int
    candidates: int
    label: str = ""
    best: str | None = None
    best_value: float | None = None


Progress = Callable[[SearchProgress], None]


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


def _headline_blocks(row: Row, scenario: str) -> tuple[float, ...]:
    key = "throughput_sps" if scenario == "offline" else "p50_ms"
    if row.blocks:
        return tuple(float(getattr(b, key)) for b in row.blocks)
    return (float(row.throughput_sps or 0.0) if key == "throughput_sps" else row.latency_ms("p50_ms"),)


def _short(text: str | None, limit: int = 160) -> str:
    first = (text or "").split(" Hint: ")[0].strip().splitlines()
    line = first[0] if first else "no reason given"
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _check_inputs(model: Path, images: Path | None, quantize: bool, output: Path | None, force: bool) -> None:
    if images is None and quantize:
        raise UsageError(
            "--images | INT8 needs calibration data: a folder of real images the model will see.",
            hint="pass --images photos/ (half calibrate, half measure the accuracy delta), or --no-quantize to "
            "search the float precisions only.",
        )
    if images is not None and not images.is_dir():
        raise InputError(
            f"--images '{images}' | is not a folder" + (" (it does not exist)." if not images.exists() else "."),
            hint="pass a folder of images (or folder/<class>/*.jpg).",
        )
    if output is not None:
        from deploykit.optimize.bundle import check_bundle_output

        check_bundle_output(output, inputs=[p for p in (model, images) if p is not None], force=force)


def optimize(
    model: str | os.PathLike[str],
    images: str | os.PathLike[str] | None = None,
    *,
    output: str | os.PathLike[str] | None = None,
    max_drop: str | float | None = None,
    backends: Sequence[str] | None = None,
    scenario: str = "singlestream",
    time_budget: str | float | None = None,
    quantize: bool = True,
    threads: Sequence[int] | None = None,
    batches: Sequence[int] | None = None,
    engines: Sequence[str] = ENGINES,
    force: bool = False,
    seed: int = 0,
    timeout_s: float = WORKER_TIMEOUT_S,
    progress: Progress | None = None,
) -> OptimizeReport:
    """Search backend × device × precision × model variant × threads (× batch offline) for the
    fastest configuration that stays within the accuracy budget; write it as a bundle.

    Args:
        model: the float ``.onnx`` file.
        images: a folder of real images (``photos/`` or ``photos/<class>/``): half calibrate the INT8
            variants, the other half (never calibrated on) measures every accuracy figure.
        output: the bundle folder to write (None: only the report is returned).
        max_drop: the accuracy budget: ``"1%"`` or 0.01 (default); 0 keeps f32 answers only.
        backends: ``BACKEND[:DEVICE]`` specs; default every available backend × device.
        scenario: ``singlestream`` (headline p50 latency) or ``offline`` (headline throughput).
        time_budget: ``"5m"`` (default), ``"90s"`` or seconds, for the whole command.
        quantize: make INT8 (and FP16, where a device runs f16) variants; needs ``images``.
        threads: thread counts to search (default 1, 2, 4 ... up to the usable CPUs).
        batches: batch sizes for ``offline`` (default 1 and 8, or the model's fixed batch).
        engines: the INT8 engines: ``ort`` and ``nncf`` (default both; NNCF where installed).
        force: replace a non-empty ``output`` folder that is a bundle.
        seed: the image split and random inputs.
        timeout_s: the most one measurement's worker may take.
        progress: called with a ``SearchProgress`` after every measurement.

    Raises:
        UsageError, InputError, OutputError: before any work, nothing written.
        ParityError: no f32 configuration of the float model passes verification (no bundle).
        KeyboardInterrupt: interrupted before any candidate was admissible (nothing written).
    """
    from deploykit.bench.fingerprint import fingerprint
    from deploykit.bench.runner import default_backend_specs
    from deploykit.model import check_model_path, read_interface

    started = time.perf_counter()
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
    budget_s = parse_time_budget(time_budget)
    _check_inputs(model_path, images_path, quantize, output_path, force)
    interface = read_interface(model_path)
    batch_list = batches_of(interface, scenario, batches)
    thread_list = sorted(set(threads)) if threads else thread_counts()
    if any(t < 1 for t in thread_list):
        raise UsageError(f"--threads {thread_list} | expected positive counts.", hint="e.g. --threads 1,2.")
    specs = list(backends) if backends else default_backend_specs()
    unknown = [e for e in engines if e not in ENGINES]
    if unknown or not engines:
        raise UsageError(
            f"--engine {','.join(engines)} | expected one or more of {', '.join(ENGINES)}.",
            hint="ort: ONNX Runtime static QDQ; nncf: OpenVINO's NNCF.",
        )
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="deploykit-optimize-") as scratch_dir:
        scratch = Path(scratch_dir)
        search = _Search(
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
        search.prepare_inputs([path for path, _ in accuracy], seed)
        search.report("variants", 0, 1)
        calibration_dir = link_folder(scratch / "calibration", calibration) if calibration else None
        fp16 = any(runs_f16(spec) for spec in specs)
        (scratch / "variants").mkdir()
        variants, more = make_variants(
            model_path, scratch / "variants", calibration_dir, quantize=quantize, engines=engines, fp16=fp16, seed=seed
        )
        notes += more
        states, more = expand(variants, specs, scenario=scenario, threads=thread_list, batches=batch_list)
        notes += more
        if not states:
            raise UsageError(
                f"optimize '{model_path.name}' | no candidate to run: {'; '.join(notes) or 'no backend'}.",
                hint="'deploykit backends' lists what runs here.",
            )
        search.states = states
        search.run_oracle()
        partial = False
        try:
            search.screen()
            search.halve()
        except KeyboardInterrupt:
            if not search.admissible():
                raise
            partial = True
            notes.append("interrupted (Ctrl-C): the best candidate so far, from fewer rounds than planned")
        report = search.finish(
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
            ),
            classes=tuple(label or "" for _, label in accuracy) if search.truth is not None else (),
            variants=[v for v, _ in variants],
            partial=partial,
            notes=notes,
            started=started,
            device=fingerprint(),
        )
        if output_path is not None:
            from deploykit.optimize.bundle import write_bundle

            chosen = report.best
            source = next(path for variant, path in variants if variant.name == chosen.variant)
            write_bundle(output_path, report, source, search.pipeline, force=force)
    return report


class _Search:
    """The screening round, the halving rounds and the final ranking of one ``optimize`` call."""

    def __init__(
        self,
        model: Path,
        interface: Any,
        scratch: Path,
        *,
        scenario: str,
        max_drop: float,
        deadline: float,
        timeout_s: float,
        progress: Progress | None,
    ) -> None:
        from deploykit.quantize.api import pipeline_facts

        self.model, self.interface, self.scratch = model, interface, scratch
        self.scenario, self.max_drop, self.deadline, self.timeout_s = scenario, max_drop, deadline, timeout_s
        self.on_progress = progress
        self.states: list[CandidateState] = []
        self.cases: list[dict[str, np.ndarray]] = []
        self.inputs: dict[int, Path] = {}
        self.check_paths: list[Path] = []
        self.references: list[dict[str, np.ndarray]] | None = None
        self.oracle = OracleInfo("none", False, "no oracle ran yet")
        self.task: Any = None
        self.task_reference: tuple[str, list[dict[str, np.ndarray]]] | None = None
        self.truth: list[int] | None = None  # the accuracy images' true classes (class folders of a classifier)
        self.reference_top1: float | None = None
        self.measurements = 0
        task, preprocess, labels = pipeline_facts(model)
        self.task_name = task
        self.pipeline: dict[str, Any] = {
            "task": task,
            "preprocess": None if preprocess is None else dataclasses.asdict(preprocess),
            "labels": labels or None,
        }

    # --- inputs and oracle ---------------------------------------------------------------
    def prepare_inputs(self, accuracy: Sequence[Path], seed: int) -> None:
        from deploykit.inputs import make_inputs, save_arrays
        from deploykit.verify.task_metric import task_of
        from deploykit.vision.image import image_cases

        if accuracy:
            folder = link_folder(self.scratch / "accuracy", [(p, None) for p in accuracy])
            self.cases, _ = image_cases(self.model, folder, len(accuracy))
            self.task = task_of({s.name: s for s in self.interface.outputs}, self.interface.metadata)
        else:
            self.cases = [
                make_inputs(
                    self.interface.inputs,
                    seed=seed,
                    metadata=self.interface.metadata,
                    model_name=f"'{self.model.name}'",
                )
            ]
        for index, case in enumerate(self.cases):
            self.check_paths.append(self.scratch / f"check-{index}.npz")
            save_arrays(self.check_paths[-1], case)

    def _input_for(self, batch: int) -> Path:
        if batch not in self.inputs:
            from deploykit.bench.runner import rebatch
            from deploykit.inputs import batch_axis_of, save_arrays

            axes = {s.name: batch_axis_of(s, set(), {}) for s in self.interface.inputs}
            path = self.scratch / f"inputs-b{batch}.npz"
            save_arrays(path, rebatch(self.cases[0], axes, batch))
            self.inputs[batch] = path
        return self.inputs[batch]

    def run_oracle(self) -> None:
        from deploykit.verify.check import run_oracle

        self.report("oracle", 0, 1)
        # every held-out image: f32 is compared element-wise on each, and the task metric of every
        # candidate is measured against the oracle's own f32 outputs
        self.oracle, references = run_oracle(self.model, "auto", self.cases, timeout_s=self.timeout_s)
        self.references = None if references is None else references[: len(self.cases)]
        if self.task is not None and self.oracle.independent and self.references is not None:
            if len(self.references) == len(self.cases):
                self.task_reference = (self.oracle.name, list(self.references))

    # --- progress --------------------------------------------------------------------------
    def admissible(self) -> list[CandidateState]:
        """Candidates still in the search that are verified and within the accuracy budget."""
        return [s for s in self.states if s.rounds and s.accurate and s.stopped is None]

    def _leader(self) -> tuple[str | None, float | None]:
        alive = self.admissible()
        if not alive:
            return None, None
        sign = -1.0 if self.scenario == "offline" else 1.0
        best = min(alive, key=lambda s: sign * float(np.median([b for r in s.rounds for b in r.blocks])))
        return best.label, float(np.median([b for r in best.rounds for b in r.blocks]))

    def report(self, stage: str, done: int, total: int, label: str = "") -> None:
        if self.on_progress is None:
            return
        best, value = self._leader()
        alive = sum(1 for s in self.states if s.alive)
        self.on_progress(SearchProgress(stage, done, total, alive, len(self.states), label, best, value))

    # --- measuring -------------------------------------------------------------------------
    def _measure(self, state: CandidateState, *, screening: bool) -> Row | None:
        from deploykit.bench.runner import measure_isolated

        duration = SCREEN_DURATION_S if screening else ROUND_DURATION_S
        config = dataclasses.replace(state.config, duration_s=duration, iterations=None, warmup=WARMUP)
        self.measurements += 1
        outputs = self.scratch / f"outputs-{self.measurements}.npz"
        began = time.perf_counter()
        row, _, checked = measure_isolated(
            state.path,
            config,
            self._input_for(config.batch),
            outputs,
            self.check_paths if screening else [],
            None,
            self.timeout_s,
        )
        state.cost_s = time.perf_counter() - began
        for leftover in self.scratch.glob(f"outputs-{self.measurements}.npz*"):
            leftover.unlink()
        if not row.ok or row.latency is None:
            state.stopped = f"did not run: {_short(row.error)}"
            return None
        state.session = row.session
        state.rounds.append(
            RoundResult(
                row.latency.p50_ms,
                row.latency.p90_ms,
                row.latency.p99_ms,
                float(row.throughput_sps or 0.0),
                _headline_blocks(row, self.scenario),
                row.latency.count,
            )
        )
        if screening:
            self._judge(state, row, checked)
        return row

    def _judge(self, state: CandidateState, row: Row, checked: list[dict[str, np.ndarray]]) -> None:
        from deploykit.verify.check import judge_run
        from deploykit.verify.isolated import CandidateRun

        exact = state.variant.name == "float" and state.config.precision == "f32"
        if self.references is None and exact and self.task_reference is None:
            # no independent oracle ran: the first f32 run is the reference, every verdict unverified
            detail = f"{self.oracle.detail}; " if self.oracle.detail else ""
            self.oracle = OracleInfo(state.label, False, detail + f"candidates compared with {state.label}")
            self.references = checked[:1]
        info = None if row.session is None else row.session.to_dict()
        run = CandidateRun(state.label, info, checked, None if checked else "no outputs on the held-out inputs")
        verdict = judge_run(
            run,
            self.cases,
            self.references or [],
            self.oracle,
            precision=state.config.precision,
            task=self.task,
            task_reference=self.task_reference,
            metadata=self.interface.metadata,
        )
        state.verdict, state.delta = verdict, accuracy_delta(verdict)
        if self.truth is not None and len(checked) == len(self.truth):
            self._top1_accuracy(state, checked)
        good = verdict.passed or (verdict.status == "unverified" and verdict.agreement is True)
        if not good:
            state.stopped = f"verification: {verdict.label} — {_short(verdict.reason)}"
        elif state.delta is None:
            state.stopped = (
                "accuracy delta unknown: reduced precision is judged by the task metric on real images "
                "(pass --images photos/ of a classifier or detector)"
            )
        elif state.delta > self.max_drop + 1e-12:
            metric = verdict.task.metric if verdict.task else "task metric"
            state.stopped = f"over the accuracy budget: {metric} delta {state.delta:.2%} > {self.max_drop:.2%}"
        else:
            state.accurate = True
            if exact and self.task_reference is None and self.task is not None:
                self.task_reference = (state.label, checked)

    def _top1_accuracy(self, state: CandidateState, checked: list[dict[str, np.ndarray]]) -> None:
        """The candidate's top-1 accuracy against the class folders, and the reference's (the oracle's
        f32 outputs, or the first f32 run without an independent oracle)."""
        from deploykit.verify.tasks import classification_agreement

        def scores(outputs: Sequence[Mapping[str, np.ndarray]]) -> np.ndarray:
            name = next(iter(outputs[0]))
            return np.concatenate([o[name].reshape(o[name].shape[0], -1) for o in outputs])

        reference = self.references if self.references and len(self.references) == len(checked) else checked
        agreement = classification_agreement(scores(reference), scores(checked), self.truth)
        state.top1_accuracy = agreement.top1_accuracy
        if self.reference_top1 is None:
            self.reference_top1 = agreement.reference_top1_accuracy

    def screen(self) -> None:
        """Every candidate once, with the held-out images; the float f32 ones first (the reference)."""
        total = len(self.states)
        exact = [s for s in self.states if s.variant.name == "float" and s.config.precision == "f32"]
        if not exact:
            raise UsageError(
                f"optimize '{self.model.name}' | no candidate runs the float model in f32, the answer every other "
                "precision is judged against.",
                hint="add a backend that runs f32 (-b onnxruntime); 'deploykit backends' lists what runs here.",
            )
        for index, state in enumerate(self.states):
            over = time.perf_counter() > self.deadline
            if over and state not in exact:
                state.stopped = "over the time budget before its screening round"
                continue
            self.report("screening", index, total, state.label)
            self._measure(state, screening=True)
            if state is exact[-1] and not any(s.alive for s in exact):
                reasons = "; ".join(f"{s.label}: {s.stopped}" for s in exact)
                raise ParityError(
                    f"model '{self.model.name}' | no f32 configuration gives the right answer ({reasons}).",
                    hint="'deploykit compare MODEL --inputs photos/' shows each backend's verdict; no bundle was "
                    "written.",
                )
        self.report("screening", total, total)

    def _intervals(self, states: Sequence[CandidateState]) -> dict[str, Interval]:
        return {s.label: bootstrap_interval([list(r.blocks) for r in s.rounds]) for s in states}

    def _score(self, interval: Interval) -> float:
        return -interval.estimate if self.scenario == "offline" else interval.estimate

    def _cull(self, stage: str, rounds: int) -> None:
        """Stop the dominated (interval separated from the leader's, on the slow side) and the slower
        half of the rest, except the leader and the simplest candidate tied with it. Until
        ``MIN_ROUNDS`` are done the runner-up stays too: one worker's run is not yet run-to-run noise."""
        alive = [s for s in self.states if s.alive and s.rounds]
        if len(alive) < 2:
            return
        intervals = self._intervals(alive)
        alive.sort(key=lambda s: self._score(intervals[s.label]))
        leader, lead = alive[0], intervals[alive[0].label]
        unit = "samples/s" if self.scenario == "offline" else "ms"
        tied = []
        for position, state in enumerate(alive[1:], start=1):
            mine = intervals[state.label]
            if mine.separated_from(lead) and not (position == 1 and rounds < MIN_ROUNDS):
                state.stopped = (
                    f"slower than {leader.label}: {mine.describe(unit)} vs {lead.describe(unit)} (intervals separate)"
                )
                state.stage = stage
            else:
                tied.append(state)
        group = [leader, *tied]
        simplest = min(group, key=lambda s: (s.entry().simplicity, self._score(intervals[s.label])))
        keep = max(2, math.ceil(len(group) / 2))
        for position, state in reversed(list(enumerate(group))):
            if len(group) <= keep:
                break
            if state in (leader, simplest):
                continue
            state.stopped = (
                f"successive halving: ranked {position + 1} of {len(alive)} after {stage} "
                f"({intervals[state.label].describe(unit)})"
            )
            state.stage = stage
            group.remove(state)

    def _fit_budget(self, alive: list[CandidateState], stage: str) -> list[CandidateState]:
        """The candidates whose next round fits the time left (each costs what its last one did):
        the slowest stop first, never the leader or the simplest candidate tied with it; if even
        those two do not fit, none is measured again."""
        intervals = self._intervals(alive)
        ranked = sorted(alive, key=lambda s: self._score(intervals[s.label]))
        lead = intervals[ranked[0].label]
        tied = [s for s in ranked if not intervals[s.label].separated_from(lead)]
        keep = {ranked[0].label, min(tied, key=lambda s: s.entry().simplicity).label}
        left = self.deadline - time.perf_counter()
        for state in list(reversed(ranked)):
            if sum(s.cost_s for s in ranked) <= left or len(ranked) <= 2:
                break
            if state.label in keep:
                continue
            state.stopped = f"over the time budget: no time for another round after {stage}"
            state.stage = stage
            ranked.remove(state)
        return ranked if sum(s.cost_s for s in ranked) <= left else []

    def halve(self) -> None:
        """Rounds interleaved across the survivors (a rotated order each round) until one is left,
        ``MAX_ROUNDS`` are done or the next round would overrun the time budget."""
        self._cull("screening", 1)
        for number in range(2, MAX_ROUNDS + 1):
            alive = [s for s in self.states if s.alive and s.rounds]
            if len(alive) < 2:
                return
            alive = self._fit_budget(alive, f"round {number - 1}")
            if len(alive) < 2:
                return
            stage = f"round {number}"
            order = alive[number % len(alive) :] + alive[: number % len(alive)]
            for index, state in enumerate(order):
                self.report(stage, index, len(order), state.label)
                self._measure(state, screening=False)
                if not state.alive:
                    state.stage = stage
            self.report(stage, len(order), len(order))
            self._cull(stage, number)

    # --- the answer ------------------------------------------------------------------------
    def finish(
        self,
        *,
        settings: OptimizeSettings,
        variants: Sequence[Variant],
        partial: bool,
        notes: list[str],
        started: float,
        device: Mapping[str, Any],
        classes: Sequence[str] = (),
    ) -> OptimizeReport:
        finalists = self.admissible()
        for state in self.states:  # a measurement cut short by Ctrl-C leaves a candidate without verdict
            if state.alive and state not in finalists:
                state.stopped = "not screened: the search was interrupted" if partial else "not measured"
        unit = "samples/s" if self.scenario == "offline" else "ms"
        # every accurate candidate is ranked, the ones stopped early with their fewer rounds: the reason
        # then names the runner-up, and a tie with a stopped one still goes to the simpler setup
        eligible = [s for s in self.states if s.rounds and s.accurate]
        ranking: Ranking = rank([s.entry() for s in eligible], higher_is_better=self.scenario == "offline", unit=unit)
        if not any(s.accurate and (s.variant.quantized or s.config.precision != "f32") for s in self.states):
            notes.append(
                "only f32 configurations stay within the accuracy budget: the answer is f32 (the "
                "Pareto front shows what reduced precision would cost)"
            )
        intervals = self._intervals([s for s in self.states if s.rounds])
        results = []
        for state in self.states:
            status: CandidateStatus
            if state.label == ranking.chosen:
                status, reason, stage = "chosen", ranking.reason, "final"
            elif state in finalists:
                status, stage = "finalist", "final"
                reason = (
                    f"tied with {ranking.chosen}, which is simpler"
                    if state.label in ranking.tied
                    else f"slower than {ranking.chosen} (intervals separate)"
                )
            else:
                status, reason, stage = "stopped", state.stopped or "", state.stage
            results.append(
                CandidateResult(
                    state.label,
                    state.variant.name,
                    state.config,
                    status,
                    stage,
                    reason,
                    tuple(state.rounds),
                    intervals.get(state.label),
                    state.verdict,
                    state.delta,
                    state.session,
                    state.top1_accuracy,
                )
            )
        rank_of = {"chosen": 0, "finalist": 1, "stopped": 2}
        results.sort(key=lambda c: (rank_of[c.status], self._score(c.headline) if c.headline else math.inf))
        chosen = next(c for c in results if c.status == "chosen")
        return OptimizeReport(
            model=ModelInfo(
                str(self.model), file_sha256(self.model), list(self.interface.inputs), list(self.interface.outputs)
            ),
            settings=settings,
            task=self.task_name,
            metric=None if self.task is None else ("top-1 agreement" if self.task_name == "classify" else "mAP@0.5"),
            oracle=self.oracle,
            variants=tuple(variants),
            candidates=tuple(results),
            chosen=chosen.label,
            decision=ranking,
            baseline=self._baseline(results, chosen),
            pareto=tuple(self._pareto(results)),
            partial=partial,
            elapsed_s=round(time.perf_counter() - started, 2),
            device=dict(device),
            notes=tuple(dict.fromkeys(notes)),
            ground_truth=None
            if self.truth is None
            else GroundTruth(tuple(sorted(set(classes))), len(self.truth), self.oracle.name, self.reference_top1),
        )

    def _baseline(self, results: Sequence[CandidateResult], chosen: CandidateResult) -> Baseline | None:
        pool = [
            c
            for c in results
            if c.config.backend == BASELINE_BACKEND
            and c.variant == "float"
            and c.config.precision == "f32"
            and c.headline is not None
            and c.config.batch == chosen.config.batch
        ]
        if not pool or chosen.headline is None:
            return None
        best = min(pool, key=lambda c: self._score(c.headline))  # type: ignore[arg-type]
        assert best.headline is not None
        ratio = (
            chosen.headline.estimate / best.headline.estimate
            if self.scenario == "offline"
            else best.headline.estimate / chosen.headline.estimate
        )
        return Baseline(best.label, best.headline, round(ratio, 3))

    def _pareto(self, results: Sequence[CandidateResult]) -> list[str]:
        judged = [
            c
            for c in results
            if c.headline is not None
            and c.accuracy_delta is not None
            and c.verdict is not None
            and c.verdict.status in ("pass", "fail", "unverified")
        ]
        judged.sort(key=lambda c: (self._score(c.headline), c.accuracy_delta))  # type: ignore[arg-type]
        front: list[CandidateResult] = []
        for candidate in judged:
            if not front or candidate.accuracy_delta < front[-1].accuracy_delta:  # type: ignore[operator]
                front.append(candidate)
        return [c.label for c in front]
