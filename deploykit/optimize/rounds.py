"""The rounds of ``optimize``'s search: the held-out inputs and the oracle, one short screening
round per candidate (each in its own bench worker, judged by the verification subsystem; one
candidate of every precision class first, ``candidates.screening_order``), and how one round of a
finalist is measured in its resident worker; who the finalists are and how their rounds are
scheduled is ``finalists``' (``Search`` is its one subclass). The finalists' minimum evidence is
reserved before anything optional is screened. Candidates stopped on the way say why. The progress
events a bar shows come from here too.

Timing is bench's (``bench.runner.measure_isolated``); verdicts are verify's (``judge_run``). What
was measured is ranked in ``answer``; ``search.optimize`` drives it all and handles Ctrl-C.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from deploykit.bench.rows import Row, accuracy_delta
from deploykit.errors import InputError, ParityError, UsageError
from deploykit.optimize.accuracy import DeltaInterval, min_images, share_interval
from deploykit.optimize.accuracy import bootstrap_interval as bootstrap_delta
from deploykit.optimize.candidates import (
    SCREEN_DURATION_S,
    WARMUP,
    CandidateState,
    float_layers,
    link_folder,
    users_paths,
)
from deploykit.optimize.finalists import FinalistRounds
from deploykit.optimize.ranking import precision_rank
from deploykit.optimize.results import RoundResult
from deploykit.optimize.schedule import CLOSING_S, MIN_CALLS
from deploykit.verify.verdict import OracleInfo
from deploykit.workers import ResidentWorker

# How far past the time budget the precision classes' first looks and the finalists' minimum evidence
# may run (a share of the budget): quantizing cannot starve them, and a device too busy still ends.
SCREEN_GRACE = 0.25
ROUNDS_SHARE = 0.4  # of the time budget: the thread and batch variants' screening stops before it
SCREEN_GRACE_MIN_S = 30.0  # ... and at least this long, for budgets too short to screen one class each
# screening leaves the finalists' minimum this much more than its estimate from one screening round
# each (a busy device's next rounds run slower than its last), and the time to write the answer
RESERVE_SLACK = 1.25
WORKER_TIMEOUT_S = 600.0


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
        budget_left_s: the time budget left: the search ends by then (the ETA's upper bound), or
            sooner when the halving has one candidate left or its rounds are done.
    """

    stage: str
    done: int
    total: int
    alive: int
    candidates: int
    label: str = ""
    best: str | None = None
    best_value: float | None = None
    budget_left_s: float | None = None


Progress = Callable[[SearchProgress], None]


def _headline_blocks(row: Row, scenario: str) -> tuple[float, ...]:
    key = "throughput_sps" if scenario == "offline" else "p50_ms"
    if row.blocks:
        return tuple(float(getattr(b, key)) for b in row.blocks)
    return (float(row.throughput_sps or 0.0) if key == "throughput_sps" else row.latency_ms("p50_ms"),)


def _short(text: str | None, limit: int = 160) -> str:
    first = (text or "").strip().splitlines()  # a message: its hint is kept apart
    line = first[0] if first else "no reason given"
    return line if len(line) <= limit else line[: limit - 1] + "…"


class Search(FinalistRounds):
    """The screening round and the halving rounds of one ``optimize`` call (``answer`` ranks what they measured)."""

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
        self.grace_s = SCREEN_GRACE_MIN_S  # ``optimize`` sets SCREEN_GRACE of the time budget (at least this)
        self.grace_deadline = deadline
        self.variants_deadline = deadline  # ``optimize`` keeps ROUNDS_SHARE of the budget for the rounds
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
        # the finalists' resident workers (``halve``), by label: a round costs its measurement, not a new
        # process, the runtime's import and the model's load, so more rounds fit the budget
        self.residents: dict[str, ResidentWorker] = {}
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
        from deploykit.inputs import make_inputs
        from deploykit.tasks.registry import recognise
        from deploykit.vision.image import image_cases
        from deploykit.workers import write_arrays

        if accuracy:
            folder = link_folder(self.scratch / "accuracy", [(p, None) for p in accuracy])
            try:
                self.cases, _ = image_cases(self.model, folder, len(accuracy))
            except InputError as exc:  # named by the user's photo, not by its link in the working folder
                raise InputError(users_paths(exc.message, folder), hint=exc.hint) from exc
            self.task = recognise({s.name: s for s in self.interface.outputs}, self.interface.metadata_props)
        else:
            self.cases = [
                make_inputs(
                    self.interface.inputs,
                    seed=seed,
                    metadata=self.interface.metadata_props,
                    model_name=f"'{self.model.name}'",
                )
            ]
        for index, case in enumerate(self.cases):
            self.check_paths.append(self.scratch / f"check-{index}.npz")
            write_arrays(self.check_paths[-1], case)

    def _input_for(self, batch: int) -> Path:
        if batch not in self.inputs:
            from deploykit.bench.runner import rebatch
            from deploykit.inputs import batch_axis_of
            from deploykit.workers import write_arrays

            axes = {s.name: batch_axis_of(s, set(), {}) for s in self.interface.inputs}
            path = self.scratch / f"inputs-b{batch}.npz"
            write_arrays(path, rebatch(self.cases[0], axes, batch))
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
        left = max(0.0, self.deadline - time.perf_counter())
        self.on_progress(SearchProgress(stage, done, total, alive, len(self.states), label, best, value, left))

    # --- measuring -------------------------------------------------------------------------
    def _measure(self, state: CandidateState, *, screening: bool, duration_s: float = SCREEN_DURATION_S) -> Row | None:
        from deploykit.bench.runner import measure_isolated, measure_resident

        # at least MIN_CALLS calls, so that even a slow model's round has the rule's MIN_BLOCKS blocks
        config = dataclasses.replace(state.config, duration_s=duration_s, iterations=MIN_CALLS, warmup=WARMUP)
        self.measurements += 1
        outputs = self.scratch / f"outputs-{self.measurements}.npz"
        began = time.perf_counter()
        checked: list[dict[str, np.ndarray]] = []
        if screening:  # a fresh process: the verification's check cases run on it too
            row, _, checked = measure_isolated(
                state.path, config, self._input_for(config.batch), outputs, self.check_paths, None, self.timeout_s
            )
        else:  # the rounds: the candidate's resident worker, its session open since its first round
            worker = self.residents.get(state.label)
            started = worker is not None
            if worker is None:
                worker = self.residents[state.label] = ResidentWorker("deploykit.bench.worker", state.label)
            row = measure_resident(worker, state.path, config, self._input_for(config.batch), outputs, self.timeout_s)
        state.cost_s = time.perf_counter() - began
        for leftover in self.scratch.glob(f"outputs-{self.measurements}.npz*"):
            leftover.unlink()
        if not row.ok or row.latency is None:
            state.stopped = f"did not run: {_short(row.error)}"
            return None
        state.call_s = row.latency.mean_ms / 1e3
        if screening:  # a fresh process, import, load and round: what starting its resident worker costs
            state.start_s = state.cost_s
        elif started:  # a round in a running worker: its cost besides the timed calls
            state.overhead_s = max(0.0, state.cost_s - state.call_s * row.latency.count)
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
        )
        state.verdict, state.delta = verdict, accuracy_delta(verdict)
        state.delta_interval = self._delta_interval(verdict, checked)
        if self.truth is not None and len(checked) == len(self.truth):
            self._top1_accuracy(state, checked)
        good = verdict.passed or (verdict.status == "unverified" and verdict.agreement is True)
        metric = verdict.task.metric if verdict.task else "task metric"
        interval = state.delta_interval
        if not good:
            state.stopped = f"verification: {verdict.label} — {_short(verdict.reason)}"
        elif state.delta is None:
            state.stopped = (
                "accuracy delta unknown: reduced precision is judged by the task metric on real images "
                "(pass --images photos/ of a classifier or detector)"
            )
        elif state.delta > self.max_drop + 1e-12:
            state.stopped = f"over the accuracy budget: {metric} delta {state.delta:.2%} > {self.max_drop:.2%}"
        elif interval is not None and self.proves_budget and interval.high > self.max_drop + 1e-12:
            state.stopped = (
                f"over the accuracy budget at the interval's pessimistic end: {metric} delta {interval.describe()} "
                f"> {self.max_drop:.2%}"
            )
        else:
            state.accurate = True
            if exact and self.task_reference is None and self.task is not None:
                self.task_reference = (state.label, checked)

    @property
    def proves_budget(self) -> bool:
        """Whether the held-out images are enough for ``--max-drop`` to be judged at the pessimistic
        end of each delta's interval (``accuracy.min_images``)."""
        needed = min_images(self.max_drop)
        return needed is not None and len(self.cases) >= needed

    def _delta_interval(self, verdict: Any, checked: list[dict[str, np.ndarray]]) -> DeltaInterval | None:
        """The task metric's delta with its interval over the held-out images (None: element-wise)."""
        if verdict.task is None or self.task is None or self.task_reference is None:
            return None
        reference = self.task_reference[1]
        if len(reference) != len(checked) or len(checked) != len(self.cases):
            return None
        if verdict.task.metric == "top-1 agreement":
            return share_interval(float(verdict.task.value), len(self.cases))
        task = self.task
        expected = [task.decode(r, feeds, reference=True) for feeds, r in zip(self.cases, reference, strict=True)]
        found = [task.decode(c, feeds, reference=False) for feeds, c in zip(self.cases, checked, strict=True)]
        return bootstrap_delta(lambda e, f: float(task.agreement(e, f)[0]), expected, found)

    def _top1_accuracy(self, state: CandidateState, checked: list[dict[str, np.ndarray]]) -> None:
        """The candidate's top-1 accuracy against the class folders, and the reference's (the oracle's
        f32 outputs, or the first f32 run without an independent oracle)."""
        from deploykit.tasks.classify import classification_agreement

        def scores(outputs: Sequence[Mapping[str, np.ndarray]]) -> np.ndarray:
            name = next(iter(outputs[0]))
            return np.concatenate([o[name].reshape(o[name].shape[0], -1) for o in outputs])

        reference = self.references if self.references and len(self.references) == len(checked) else checked
        agreement = classification_agreement(scores(reference), scores(checked), self.truth)
        state.top1_accuracy = agreement.top1_accuracy
        if self.reference_top1 is None:
            self.reference_top1 = agreement.reference_top1_accuracy

    def screen(self) -> None:
        """Every candidate once, with the held-out images, in ``screening_order``: one candidate of
        every precision class first (screened even past the time budget, by up to ``SCREEN_GRACE``
        of it, so quantizing cannot starve them), then the thread and batch variants while the
        budget lasts, and only if no precision class was left out for time. Each leaves the finalists
        their minimum evidence (``reserve_s``, from what screening measured; a reduced-precision class
        only the core finalists'): screened in the time the finalists' rounds needed, it would only
        end the search inconclusive (``_no_time_to_screen``)."""
        total = len(self.states)
        exact = [s for s in self.states if s.exact]
        if not exact:
            raise UsageError(
                f"optimize '{self.model.name}' | no candidate runs the float model in f32, the answer every other "
                "precision is judged against.",
                hint="add a backend that runs f32 (-b onnxruntime); 'deploykit backends' lists what runs here.",
            )
        # the precision classes' own allowance starts when screening does: quantizing and the oracle
        # are counted in the time budget but cannot eat it
        self.grace_deadline = max(self.deadline, time.perf_counter()) + self.grace_s
        for index, state in enumerate(self.states):  # a promotion only reorders the states after ``index``
            stop = None if index == 0 else self._did_not_run_before(state) or self._no_time_to_screen(state)
            if stop is None:
                self.report("screening", index, total, state.label)
                self._measure(state, screening=True)
            else:
                state.stopped = stop
            self._check_reference(exact)
            out_of_time = stop is not None and stop.startswith("over the")
            if state.first_of_precision and not (state.accurate and state.alive) and not out_of_time:
                self._promote_next_of_precision(index)
        self.report("screening", total, total)

    def _promote_next_of_precision(self, index: int) -> None:
        """The first look at a backend's precision (``states[index]``) did not run or failed its
        verdict: the next class of the same backend, device and precision (another INT8 engine, other
        float layers) is screened next, as that precision's first look, so a precision the device
        offers gets a candidate that can win before the second looks at the others."""
        failed = self.states[index]
        same = (failed.config.backend, failed.config.device, failed.config.precision)
        later = [
            position
            for position in range(index + 1, len(self.states))
            if self.states[position].representative
            and (self.states[position].config.backend, self.states[position].config.device) == same[:2]
            and self.states[position].config.precision == same[2]
        ]
        if not later or any(self.states[p].first_of_precision for p in later):
            return
        # another model file first: the same file failed to convert, or was quantized too coarsely
        chosen = min(later, key=lambda p: (self.states[p].variant.name == failed.variant.name, p))
        self.states[chosen].first_of_precision = True
        self.states.insert(index + 1, self.states.pop(chosen))

    def _no_time_to_screen(self, state: CandidateState) -> str | None:
        """Why ``state`` is not screened, or None. Its screening round (as long as the typical one so
        far) and then the finalists' minimum evidence (``reserve_s``) must fit: for a reduced-precision
        class (the biggest levers), the precision classes' allowance past the budget less the core
        finalists' minimum; for an f32 class of another backend, that allowance less all finalists'
        minimum; for a thread or batch variant, the budget itself less all finalists' minimum, and
        only before the finalists' share of the budget."""
        screened = [s.start_s for s in self.states if s.rounds]
        now, next_s = time.perf_counter(), float(np.median(screened)) if screened else 0.0
        reduced = state.representative and precision_rank(state.config.precision) > 0
        reserve = self.reserve_s(core=reduced) * RESERVE_SLACK + CLOSING_S
        whose = "the core finalists'" if reduced else "the finalists'"
        needs = f"its round (about {next_s:.1f} s) and {whose} minimum evidence ({reserve:.1f} s)"
        if state.representative:
            if now + next_s + reserve <= self.grace_deadline:
                return None
            return (
                "over the time budget before its screening round: the allowance the precision classes have past it "
                f"({SCREEN_GRACE:.0%} of it, at least {SCREEN_GRACE_MIN_S:.0f} s) has no room for {needs}"
                + self._precision_screened_as(state)
            )
        left_out = [
            s.label
            for s in self.states
            if s.representative and s.stopped is not None and s.stopped.startswith("over the time budget")
        ]
        if left_out:
            return (
                "not screened: thread and batch variants come after every precision class, and a class was left "
                f"out for time ({', '.join(left_out[:3])}{' ...' if len(left_out) > 3 else ''})"
            )
        if now <= self.variants_deadline and now + next_s + reserve <= self.deadline:
            return None
        first = next(s.label for s in self.states if s.representative and s.precision_class == state.precision_class)
        return (
            f"over the screening share of the time budget (the last {ROUNDS_SHARE:.0%} is the finalists', and it "
            f"must hold {needs}) before its screening round; its precision class was screened as {first}"
        )

    def _did_not_run_before(self, state: CandidateState) -> str | None:
        """Why ``state`` is not screened when a candidate of the same model file, backend, device and
        precision did not run, with its float layers at a precision as exact or more (another
        thread count, wait policy or float-layer precision of one that cannot open the file: a
        conversion that fails fails again, and costs as long); None otherwise."""

        def layers(candidate: CandidateState) -> int:
            return precision_rank(float_layers(candidate.config) or "f32")

        for other in self.states:
            if other is state or other.rounds or not (other.stopped or "").startswith("did not run"):
                continue
            same = (other.variant.name, other.config.backend, other.config.device, other.config.precision)
            mine = (state.variant.name, state.config.backend, state.config.device, state.config.precision)
            if same == mine and layers(other) <= layers(state):
                return f"not screened: {other.label} {other.stopped}"
        return None

    def _precision_screened_as(self, state: CandidateState) -> str:
        """``; int8 on openvino:CPU was screened as LABEL``: another class of the same backend, device
        and precision that was screened (a first look at what the device offers), or nothing."""
        config = state.config
        for other in self.states:
            same = (other.config.backend, other.config.device, other.config.precision)
            if other.rounds and other.representative and same == (config.backend, config.device, config.precision):
                return f"; {config.precision} on {config.backend}:{config.device} was screened as {other.label}"
        return ""

    def _check_reference(self, exact: Sequence[CandidateState]) -> None:
        """No f32 configuration of the float model gives the right answer: nothing else can be judged."""
        if any(s.alive for s in exact) or any(not s.rounds and s.stopped is None for s in exact):
            return
        reasons = "; ".join(f"{s.label}: {s.stopped}" for s in exact)
        raise ParityError(
            f"model '{self.model.name}' | no f32 configuration gives the right answer ({reasons}).",
            hint="'deploykit compare MODEL --inputs photos/' shows each backend's verdict; no bundle was written.",
        )

    def measure_round(self, state: CandidateState, duration_s: float) -> None:
        self._measure(state, screening=False, duration_s=duration_s)
