"""What ``optimize`` searches: the image split (calibration / accuracy, never both), the model
variants made with ``quantize`` (INT8 with the ORT and NNCF engines, FP16), and the candidates:
every variant × backend × device × native precision (``Backend.precisions``) × threads × batch.

Nothing here times or judges anything; ``search`` does.
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from deploykit.bench.config import BenchConfig
from deploykit.errors import DeployKitError, InputError, UsageError
from deploykit.io import file_sha256
from deploykit.optimize.accuracy import DeltaInterval
from deploykit.optimize.manifest import WAIT_OPTION
from deploykit.optimize.ranking import RankEntry
from deploykit.optimize.results import RoundResult, Variant
from deploykit.quantize.engines import ENGINES, QUANTIZE_ENGINES
from deploykit.verify.verdict import Verdict

MIN_IMAGES_TO_SPLIT = 4
ACCURACY_IMAGE_LIMIT = 16  # the oracle (numpy) runs on each
CALIBRATION_IMAGE_LIMIT = 100
SCREEN_DURATION_S = 0.3
WARMUP = 3
OFFLINE_BATCHES = (1, 8)


@dataclass
class CandidateState:
    """One candidate while the search runs: what it is, what was measured, why it stopped."""

    label: str
    variant: Variant
    path: Path
    config: BenchConfig
    order: int
    rounds: list[RoundResult] = field(default_factory=list)
    verdict: Verdict | None = None
    delta: float | None = None
    session: Any = None
    stopped: str | None = None
    stage: str = "screening"
    cost_s: float = 0.0
    # what its rounds cost (``schedule.FinalistCost``): one timed call, a round besides its calls
    # (None: not measured yet), and its screening, the cost of starting its resident worker
    call_s: float = 0.0
    overhead_s: float | None = None
    start_s: float = 0.0
    accurate: bool = False  # verified and within the accuracy budget
    top1_accuracy: float | None = None  # against the class folders, when they give the true classes
    delta_interval: DeltaInterval | None = None  # the accuracy delta's interval over the held-out images
    representative: bool = False  # its precision class's first look: screened whatever the time budget
    first_of_precision: bool = False  # the first look at its backend × device × precision (before other variants)
    screened_out: bool = False  # not a finalist: one short screening round, a search choice
    outranked: bool = False  # stopped because its interval separates from the leader's: the rule's claim

    @property
    def alive(self) -> bool:
        return self.stopped is None

    def entry(self) -> RankEntry:
        return RankEntry(
            self.label,
            [list(r.blocks) for r in self.rounds],
            self.config.precision,
            self.variant.quantized,
            self.config.threads,
            self.config.batch,
            sum(r.samples for r in self.rounds),
        )

    @property
    def exact(self) -> bool:
        """Whether it runs the float model in f32 (the answer every other precision is judged against)."""
        return self.variant.name == "float" and self.config.precision == "f32"

    @property
    def precision_class(self) -> tuple[str, str, str | None, str | None, str | None]:
        """Model variant × backend × device × precision (an INT8 model's with its float layers'): what a
        thread count or batch size only tunes."""
        return (
            self.variant.name,
            self.config.backend,
            self.config.device,
            self.config.precision,
            float_layers(self.config),
        )


def thread_counts(cpus: int | None = None) -> list[int]:
    """1, 2, 4 ... up to the usable CPUs, and the CPU count itself."""
    count = cpus or (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
    counts = {count}
    value = 1
    while value < count:
        counts.add(value)
        value *= 2
    return sorted(counts)


def split_images(
    folder: Path, quantize: bool, seed: int
) -> tuple[list[tuple[Path, str | None]], list[tuple[Path, str | None]]]:
    """(calibration images, accuracy images), each with its class folder: disjoint, seeded, and
    stratified, so both halves see every class that has two images or more."""
    from deploykit.quantize.calibration import labelled_images

    try:
        found = labelled_images(folder)
    except InputError as exc:  # quantize's hint names .npz arrays, which optimize cannot measure accuracy on
        if "holds no images" not in exc.problem:  # a FIFO or device named a.jpg: its own message names it
            raise
        raise InputError(
            f"--images '{folder}' | holds no images (looked for .jpg, .png, .bmp, .webp, .tif, directly and one "
            "folder down).",
            hint="put real photos the model will see in the folder (or in folder/<class>/ sub-folders).",
        ) from exc
    minimum = MIN_IMAGES_TO_SPLIT if quantize else 1
    if len(found) < minimum:
        raise InputError(
            f"--images '{folder}' | holds {len(found)} image(s); INT8 needs at least {MIN_IMAGES_TO_SPLIT}: half "
            "calibrate, the other half measures the accuracy delta (never calibrated on).",
            hint="add real photos the model will see (a few dozen give a steadier delta), or pass --no-quantize.",
        )
    order = np.random.default_rng(seed).permutation(len(found)).tolist()
    if not quantize:
        return [], [found[i] for i in sorted(_stratified(found, order, ACCURACY_IMAGE_LIMIT, keep=0))]
    picked = _stratified(found, order, min(ACCURACY_IMAGE_LIMIT, len(found) // 2), keep=1)
    rest = [i for i in order if i not in picked]
    return [found[i] for i in sorted(rest[:CALIBRATION_IMAGE_LIMIT])], [found[i] for i in sorted(picked)]


def _stratified(found: Sequence[tuple[Path, str | None]], order: Sequence[int], count: int, keep: int) -> set[int]:
    """``count`` indices taken class by class in turn (in the shuffled ``order``), leaving each class
    ``keep`` images for the other half while that is possible. Without class folders: ``order[:count]``."""
    classes: dict[str | None, list[int]] = {}
    for index in order:
        classes.setdefault(found[index][1], []).append(index)
    picked: list[int] = []
    # first up to half of each class, then what the other half can spare, then anything left
    sizes = [len(members) for members in classes.values()]
    for quota in ([n // 2 if keep else n for n in sizes], [n - keep for n in sizes], sizes):
        for turn in range(max(quota, default=0)):
            for members, limit in zip(classes.values(), quota, strict=True):
                if len(picked) >= count:
                    return set(picked)
                if turn < limit and members[turn] not in picked:
                    picked.append(members[turn])
    return set(picked)


def ground_truth(
    accuracy: Sequence[tuple[Path, str | None]],
    calibration: Sequence[tuple[Path, str | None]],
    labels: Sequence[str],
    task: str | None,
    folder: Path,
) -> tuple[list[int] | None, str | None]:
    """The true class of each accuracy image from its class folder, for a classifier's top-1
    accuracy; None and a note when there is none to measure (no class folders, not a classifier,
    images outside a class folder). Every class folder, calibration ones included, must name a label.

    Raises:
        InputError: a class folder names none of the classifier's labels.
    """
    names = sorted({label for _, label in [*accuracy, *calibration] if label is not None})
    if not names:
        return None, None
    if task != "classify":
        kind = "a detector" if task == "detect" else "not a classifier"
        return None, f"class folders of --images are not used: top-1 accuracy is for classifiers, this is {kind}"
    from deploykit.labels import class_index

    unknown = [name for name in names if class_index(name, labels) is None]
    if unknown:
        import difflib

        more = f" ... ({len(labels)} in all)" if len(labels) > 8 else ""
        shown = ", ".join(repr(label) for label in labels[:8]) + more
        close = {n: difflib.get_close_matches(n, labels, n=1, cutoff=0.6) for n in unknown}
        guesses = "; ".join(f"'{n}': did you mean '{m[0]}'?" for n, m in close.items() if m)
        raise InputError(
            f"--images '{folder}' | class folder(s) {', '.join(repr(n) for n in unknown)} name none of the model's "
            f"labels; expected folder names among {shown} (or a class index)." + (f" {guesses}" if guesses else ""),
            hint="name each sub-folder after the class of its images as the model's labels spell it (case, '_' "
            "and ' ' do not matter), or by its class index; or put the images directly in the folder (then no "
            "top-1 accuracy).",
        )
    loose = sum(1 for _, label in accuracy if label is None)
    if loose:
        return None, f"top-1 accuracy not measured: {loose} image(s) lie directly in --images, outside a class folder"
    return [class_index(label, labels) for _, label in accuracy], None  # type: ignore[arg-type,misc]


def link_folder(folder: Path, files: Sequence[tuple[Path, str | None]]) -> Path:
    folder.mkdir(parents=True)
    for index, (path, label) in enumerate(files):
        target = folder / label if label else folder
        target.mkdir(exist_ok=True)
        (target / f"{index:05d}-{path.name}").symlink_to(path.resolve())
    return folder


def users_paths(text: str, linked: Path | None) -> str:
    """``text`` with every path of a folder ``link_folder`` made replaced by the user's file it links to: a
    message names the photo the user has, never its working copy's name in a temporary folder."""
    if linked is None or not linked.is_dir():
        return text
    for link in sorted(linked.rglob("*"), key=lambda p: -len(str(p))):
        if link.is_symlink() and str(link) in text:
            text = text.replace(str(link), os.readlink(link))
    return text


def make_variants(
    model: Path,
    scratch: Path,
    calibration: Path | None,
    *,
    quantize: bool,
    engines: Sequence[str],
    fp16: bool,
    seed: int,
) -> tuple[list[tuple[Variant, Path]], list[str]]:
    """The float model and, when asked, its INT8 (ORT; NNCF where installed) and FP16 variants."""
    from deploykit.quantize import QuantizeSettings
    from deploykit.quantize import quantize as run_quantize

    variants = [(Variant("float", model.name, "f32", file_sha256(model)), model)]
    notes: list[str] = []
    if not quantize:
        return variants, notes
    jobs: list[tuple[str, dict[str, Any], str]] = []
    for name in [e for e in ENGINES if e in engines]:
        offered = QUANTIZE_ENGINES[name]
        if offered.unavailable_reason() is None:
            jobs.append((f"{offered.precision}-{name}", {"engine": name}, offered.precision))
        else:
            notes.append(
                f"{offered.title} is not installed: no {offered.precision}-{name} variant "
                "(pip install 'deploykit[quantize]')"
            )
    if fp16:
        jobs.append(("fp16", {"fp16": True}, "f16"))
    for name, settings, precision in jobs:
        path = scratch / f"{model.stem}.{name}.onnx"
        started = time.perf_counter()
        try:
            calibrate = None if settings.get("fp16") else calibration
            with warnings.catch_warnings():  # onnxconverter-common warns per truncated weight; the verdict judges
                warnings.simplefilter("ignore", UserWarning)
                made = QuantizeSettings(held_out=0, measure_speed=False, seed=seed, **settings)
                run_quantize(model, path, made, calibrate=calibrate)
        except DeployKitError as exc:
            if isinstance(exc, InputError) and exc.subject.startswith("image '"):
                # a photo only decoding showed broken (1x1 pixels, two channels): the user's data, refused
                raise InputError(users_paths(exc.message, calibration), hint=exc.hint) from exc
            notes.append(f"variant {name}: not made ({users_paths(exc.message, calibration)})")
            continue
        seconds = round(time.perf_counter() - started, 2)
        engine = "fp16" if settings.get("fp16") else str(settings["engine"])
        variants.append((Variant(name, path.name, precision, file_sha256(path), engine, seconds), path))
    return variants, notes


def search_specs(given: Sequence[str] | None) -> tuple[list[str], list[str]]:
    """The backend specs ``optimize`` searches, and a note for each backend it leaves out: the given
    ones; else every default candidate, and every backend searched once the user has made it ready
    (``Backend.search.searched_when_ready``: LiteRT with its converter environment) when it is, named with the
    reason and the command that readies it when it is not. Nothing is created here."""
    from deploykit.backends.registry import backend_names, get_backend
    from deploykit.verify.check import default_backend_specs

    if given:
        return list(given), []
    specs, notes = default_backend_specs(), []
    for name in backend_names():
        backend = get_backend(name)
        if backend.search.default_candidate or not backend.search.searched_when_ready or not backend.is_available():
            continue
        reason = backend.conversion.onnx_unavailable_reason()
        if reason is not None:
            notes.append(f"{name}: not searched ({reason})")
            continue
        specs += [f"{name}:{device}" for device in backend.search.swept_devices(backend.devices())]
    return specs, notes


def converted_variants(
    model: Path, specs: Sequence[str], *, quantize: bool
) -> tuple[list[tuple[Variant, Path]], list[str], list[str]]:
    """What the backends that convert need before their candidates run, made now and timed (a conversion
    is never a screening run that ran out of time): each one's conversion of the float model and, with
    ``quantize``, the reduced-weight files its own converter makes (``Backend.conversion.weights``), as
    variants of that backend alone. A reduced file the device computes no faster (f16 weights where
    ``Backend.precisions`` has no f16) is not made, and said so; a conversion that fails is a note.

    Returns:
        (the reduced-weight variants, the notes, the specs whose float conversion failed).
    """
    from deploykit.backends.registry import canonical_name, get_backend
    from deploykit.model import Model
    from deploykit.verify.check import parse_backend_spec

    source: Model | None = None
    variants: list[tuple[Variant, Path]] = []
    notes: list[str] = []
    failed: list[str] = []
    done: set[tuple[str, str]] = set()
    for spec in specs:
        name, device = parse_backend_spec(spec)
        backend = get_backend(canonical_name(name))
        if not backend.is_available() or (backend.name, device or "") in done:
            continue
        done.add((backend.name, device or ""))
        source = source or Model.open(model)
        try:
            if backend.conversion.converted_file(source, {}) is None:
                continue
        except DeployKitError as exc:
            notes.append(f"{backend.name}: not searched (converting {model.name}: {exc.message})")
            failed.append(spec)
            continue
        native = backend.precisions(device or backend.default_device)
        for precision, options in backend.conversion.weights.items() if quantize else ():
            label = f"{precision}-{backend.name}"
            if precision not in ("int8", *native):
                notes.append(
                    f"variant {label}: not made ({backend.name} computes {', '.join(native)} here: "
                    f"{precision} weights make a smaller file, not a faster one)"
                )
                continue
            started = time.perf_counter()
            try:
                backend.conversion.converted_file(source, options)
            except DeployKitError as exc:
                notes.append(f"variant {label}: not made ({exc.message})")
                continue
            seconds = round(time.perf_counter() - started, 2)
            variant = Variant(
                label,
                model.name,
                precision,
                source.sha256,
                backend.name,
                seconds,
                backend=backend.name,
                options=dict(options),
            )
            variants.append((variant, model))
    return variants, notes, failed


def expand(
    variants: Sequence[tuple[Variant, Path]],
    specs: Sequence[str],
    *,
    scenario: str,
    threads: Sequence[int],
    batches: Sequence[int],
    busy: bool = False,
) -> tuple[list[CandidateState], list[str]]:
    """Every variant × backend × device × native precision × threads × batch (× wait policy on a
    busy device, ``busy``), in ``screening_order``."""
    from deploykit.backends.registry import canonical_name, get_backend
    from deploykit.bench.runner import expand_configs
    from deploykit.verify.check import expand_candidates, parse_backend_spec

    states: list[CandidateState] = []
    notes: list[str] = []
    for variant, path in variants:
        for spec in specs:
            name, device = parse_backend_spec(spec)
            backend = get_backend(canonical_name(name))
            device = device or backend.default_device
            if variant.backend is not None and variant.backend != backend.name:
                continue
            if variant.quantized and variant.backend is None and backend.conversion.weights:
                notes.append(
                    f"{backend.name}:{device} {variant.name}: not run ({backend.name} runs the reduced "
                    "files its own converter makes from the float model)"
                )
                continue
            native = backend.precisions(device)
            if variant.name == "float":
                precisions: list[str | None] = list(native) if "precision" in backend.options else ["f32"]
            elif variant.precision == "f16":
                if "f16" not in native:
                    continue
                precisions = ["f16"]
            else:
                precisions = ["int8"]
            found, more = expand_candidates(
                [f"{backend.name}:{device}"], precisions, model_precision=variant.precision, options=variant.options
            )
            if variant.precision == "int8" and "precision" in backend.options:
                found = float_layer_candidates(backend.name, device, native)
            notes += more
            counts: list[int | None] = list(threads) if "threads" in backend.options else [None]
            configs = expand_configs(
                found,
                batches=batches,
                threads=counts,
                scenario=scenario,
                warmup=WARMUP,
                iterations=None,
                duration_s=SCREEN_DURATION_S,
            )
            for config in [*configs, *(_without_spinning(configs, backend.options) if busy else [])]:
                label = f"{config.label()} {variant.name}{float_layers_suffix(config)}"
                if config.options.get(WAIT_OPTION) is False:
                    label += " no-spin"
                states.append(CandidateState(label, variant, path, config, len(states)))
    return screening_order(states), list(dict.fromkeys(notes))


def screening_order(states: Sequence[CandidateState]) -> list[CandidateState]:
    """The order candidates are screened in: the biggest expected gain on this device first.

    One representative of every precision class (model variant × backend × device × precision; the
    most threads, the first batch) comes before any thread or batch variant, and among them one of
    every precision a backend offers on its device (``Backend.precisions``: int8, bf16, f16, f32)
    comes before a second model variant or float-layer precision of the same one, so that many INT8
    variants cannot use up the time the bf16/f16 classes need. Within each of those tiers, the
    reference first (the default backend's float f32: every verdict and the speedup are judged
    against it), then by the precision's expected gain — int8, then bf16/f16, then f32, which is
    what ``Backend.precisions`` offers only where the device has the units for it — then the order
    of ``--backend``. The thread and batch variants follow in the same class order.
    """
    from deploykit.backends.registry import DEFAULT_BACKEND
    from deploykit.optimize.ranking import precision_rank

    def threads(state: CandidateState) -> float:
        return -float(state.config.threads) if state.config.threads else -float("inf")

    representatives: dict[tuple[str, str, str | None, str | None, str | None], CandidateState] = {}
    for state in sorted(states, key=lambda s: (s.config.batch, threads(s), s.order)):
        representatives.setdefault(state.precision_class, state)
    offered: dict[tuple[str, str | None, str | None], CandidateState] = {}
    for state in representatives.values():
        offered.setdefault((state.config.backend, state.config.device, state.config.precision), state)
    firsts = {id(s) for s in offered.values()}

    def gain(state: CandidateState) -> tuple[int, int, int, int]:
        reference = state.exact and state.config.backend == DEFAULT_BACKEND
        tier = 0 if id(state) in firsts else 1
        return (0 if reference else 1, tier, -precision_rank(state.config.precision), state.order)

    first = sorted(representatives.values(), key=gain)
    for state in first:
        state.representative = True
        state.first_of_precision = id(state) in firsts
    class_rank = {state.precision_class: index for index, state in enumerate(first)}
    chosen = {id(s) for s in first}
    rest = sorted((s for s in states if id(s) not in chosen), key=lambda s: (class_rank[s.precision_class], s.order))
    return [*first, *rest]


def _without_spinning(configs: Sequence[BenchConfig], schema: Any) -> list[BenchConfig]:
    """The configurations again with idle threads that sleep instead of spinning: on a busy device a
    runtime whose threads spin for cores the app needs can collapse, so the wait policy is an axis
    there (a thread variant: screened after every precision class)."""
    import dataclasses

    if WAIT_OPTION not in schema:
        return []
    return [dataclasses.replace(c, options={**c.options, WAIT_OPTION: False}) for c in configs]


def float_layer_candidates(backend_name: str, device: str, native: Sequence[str]) -> list[Any]:
    """An INT8 model's candidates on a backend that sets its compute precision: one per float
    precision the device runs natively, pinned, because the layers left in float (and the
    quantize/dequantize pairs) otherwise run at the device's default — bf16 on one CPU, f32 on
    another: other numbers at another speed from the same bundle."""
    from deploykit.backends.registry import get_backend
    from deploykit.verify.check import Candidate

    backend = get_backend(backend_name)
    return [
        Candidate(backend_name, device, "int8", backend.precision_options(precision))
        for precision in native
        if precision != "int8"
    ]


def float_layers(config: BenchConfig) -> str | None:
    """The float layers' pinned precision of an INT8 candidate (None: not pinned, or not INT8)."""
    pinned = config.options.get("precision") if config.precision == "int8" else None
    return None if pinned is None else str(pinned)


def float_layers_suffix(config: BenchConfig) -> str:
    pinned = float_layers(config)
    return "" if pinned is None else f" (float layers {pinned})"


def batches_of(interface: Any, scenario: str, batches: Sequence[int] | None) -> list[int]:
    spec = interface.inputs[0]
    fixed = spec.shape[0] if spec.shape and isinstance(spec.shape[0], int) else None
    if fixed is not None:
        if batches and list(batches) != [fixed]:
            raise UsageError(
                f"--batch {','.join(map(str, batches))} | '{interface.path.name}' has a fixed batch of {fixed}.",
                hint="drop --batch, or export the model with a dynamic batch.",
            )
        return [fixed]
    if batches:
        return sorted(set(batches))
    return list(OFFLINE_BATCHES) if scenario == "offline" else [1]


def runs_f16(spec: str) -> bool:
    from deploykit.backends.registry import canonical_name, get_backend
    from deploykit.verify.check import parse_backend_spec

    name, device = parse_backend_spec(spec)
    backend = get_backend(canonical_name(name))
    return backend.is_available() and "f16" in backend.precisions(device or backend.default_device)
