"""A bundle's manifest and how the folder is written: ``deploykit.json`` (schema, version, what to
open and on what evidence, read back with its checks), and ``write_bundle``, which stages the chosen
model file, ``report.json``, ``report.html`` and the manifest beside the target and renames the
folder into place (all or nothing), after ``check_bundle_output`` refused what cannot be written.

Opening a bundle is ``bundle``'s.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deploykit.errors import BundleError, OutputError, ResourceError
from deploykit.io import claim_output, file_sha256
from deploykit.optimize.verified import remember_verified

if TYPE_CHECKING:
    from deploykit.backends.converted import Carried
    from deploykit.optimize.results import OptimizeReport

SCHEMA = "deploykit.bundle"
SCHEMA_VERSION = 1
MANIFEST = "deploykit.json"
REPORT = "report.json"
REPORT_HTML = "report.html"


@dataclass(frozen=True)
class BundleManifest:
    """``deploykit.json``: what the bundle opens and the evidence for it.

    Attributes:
        model_file, model_sha256: the chosen model file (a plain name in the folder) and its hash.
        variant: ``float``, ``int8-ort``, ``int8-nncf`` or ``fp16``.
        source_model: the float model searched (path, SHA-256).
        backend, device, precision, threads, batch, options: the configuration to open
            (``options`` are the session options, pinned: threads, the compute precision — an INT8
            model's float layers' too — and the wait policy where the backend has them, so another
            machine's defaults cannot change the numbers or the speed).
        compute: what computes, as ``load(bundle).info.precision_label`` reports it: ``bf16``, or
            ``int8 (float layers bf16)``.
        background_load: the busy threads the search measured under (``{"threads": N, "kind":
            ...}``; 0 threads: idle).
        scenario: ``singlestream`` or ``offline``.
        inputs, outputs: the model's interface (``TensorSpec.to_dict``).
        task, preprocess, labels: the pipeline (``detect``/``classify``), its pre-processing and names.
        verdict: the verification of the chosen configuration (with its oracle).
        accuracy: metric, delta, images, max_drop; with class folders also top1_accuracy (the chosen
            one's), reference_top1_accuracy (the f32 oracle's) and classes.
        latency: headline, p50/p90 intervals, p99, throughput, rounds.
        why: which part of the ranking rule decided; ``rule`` the rule.
        speedup: versus ONNX Runtime f32 measured in the same run (``{label, speedup}``), if it ran.
        session: what ran (``SessionInfo.to_dict``: runtime version, device, precision).
        fingerprint: the machine (``deploykit.bench.fingerprint``).
        versions: deploykit and the runtime's distributions.
        files: file name → SHA-256 of every file of the bundle but this one.
        partial: True when the search was interrupted (the best so far).
        created: UTC time of writing.
    """

    model_file: str
    model_sha256: str
    variant: str
    source_model: Mapping[str, Any]
    backend: str
    device: str | None
    precision: str | None
    threads: int | None
    batch: int
    options: Mapping[str, Any]
    scenario: str
    inputs: Sequence[Mapping[str, Any]]
    outputs: Sequence[Mapping[str, Any]]
    task: str | None
    preprocess: Mapping[str, Any] | None
    labels: Sequence[str] | None
    verdict: Mapping[str, Any] | None
    accuracy: Mapping[str, Any]
    latency: Mapping[str, Any]
    why: str
    rule: str
    speedup: Mapping[str, Any] | None
    session: Mapping[str, Any] | None
    fingerprint: Mapping[str, Any]
    versions: Mapping[str, Any]
    files: Mapping[str, str]
    partial: bool = False
    created: str = ""
    compute: str = ""
    background_load: Mapping[str, Any] | None = None
    schema: str = SCHEMA
    schema_version: int = SCHEMA_VERSION

    @property
    def spec(self) -> str:
        return f"{self.backend}:{self.device}" if self.device else self.backend

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        ordered = {"schema": data.pop("schema"), "schema_version": data.pop("schema_version")}
        ordered.update(data)
        return ordered

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "deploykit.json") -> BundleManifest:
        """The manifest ``to_dict`` wrote.

        Raises:
            BundleError: another schema, an unknown version, or a missing field.
        """
        hint = "open it with the deploykit that wrote it, or run deploykit optimize again."
        if data.get("schema") != SCHEMA:
            raise BundleError(f"bundle '{where}' | has schema {data.get('schema')!r}, expected {SCHEMA!r}.", hint=hint)
        if data.get("schema_version") != SCHEMA_VERSION:
            raise BundleError(
                f"bundle '{where}' | has schema version {data.get('schema_version')!r}; this deploykit "
                f"reads version {SCHEMA_VERSION}.",
                hint=hint,
            )
        missing = [
            f.name
            for f in dataclasses.fields(cls)
            if f.name not in data and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        ]
        if missing:
            raise BundleError(f"bundle '{where}' | lacks {', '.join(missing)}.", hint=hint)
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


def check_bundle_output(
    output: str | os.PathLike[str], *, inputs: Sequence[str | os.PathLike[str]], force: bool
) -> None:
    """Refuse a bundle folder that cannot be written, before any work: onto (or around, or inside) an
    input, a file, a non-empty folder without ``force`` (and, with it, a non-empty folder that is not a
    bundle), or a parent folder that is missing or not writable.

    Raises:
        OutputError: naming the problem.
    """
    target = Path(output)
    resolved = target.resolve()
    for given in inputs:
        source = Path(given).resolve()
        if source == resolved or resolved in source.parents or (Path(given).is_dir() and source in resolved.parents):
            raise OutputError(
                f"-o '{target}' | is, holds or lies inside the input '{given}'; a bundle is never written onto "
                "an input.",
                hint="choose another folder, e.g. -o deploy/.",
            )
    if target.exists() and not target.is_dir():
        raise OutputError(f"-o '{target}' | is a file, expected a folder for the bundle.", hint="e.g. -o deploy/.")
    if target.is_dir() and any(target.iterdir()):
        if not force:
            raise OutputError(
                f"-o '{target}' | is a folder that is not empty.",
                hint="pass --force to replace a bundle there, or choose an empty or new folder.",
            )
        if not (target / MANIFEST).is_file():
            raise OutputError(
                f"-o '{target}' | is not empty and holds no bundle ({MANIFEST}); --force replaces only a bundle.",
                hint="choose an empty or new folder.",
            )
        _check_only_bundle_files(target)
    parent = resolved.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        problem = "does not exist" if not parent.exists() else "is not a writable folder"
        raise OutputError(
            f"-o '{target}' | its parent '{parent}' {problem}.",
            hint="create the parent folder, or choose a folder you can write to.",
        )
    claim_output(target, f"-o '{target}'", kind="folder")


def _check_only_bundle_files(target: Path) -> None:
    """``--force`` replaces a bundle, not a folder: every entry must be a file the old bundle's own manifest
    lists (or the manifest itself). Anything else was put there by someone else and would be lost."""
    try:
        listed = json.loads((target / MANIFEST).read_text()).get("files")
        ours = {MANIFEST, *listed} if isinstance(listed, dict) else None
    except (OSError, ValueError, AttributeError, TypeError, RecursionError):
        ours = None
    if ours is None:
        raise OutputError(
            f"-o '{target}' | its {MANIFEST} cannot be read, so which files are the bundle's cannot be told; "
            "--force deletes only what a bundle lists.",
            hint="move what you want to keep out of the folder and delete it, or choose another folder.",
        )
    foreign = sorted(entry.name for entry in target.iterdir() if entry.name not in ours)
    if foreign:
        shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
        raise OutputError(
            f"-o '{target}' | holds {len(foreign)} file(s) the bundle there did not write ({shown}); --force "
            "replaces a bundle and deletes nothing else. Nothing was changed.",
            hint="move those files out of the folder, or choose another folder.",
        )


def bundle_file_name(model: Path) -> str:
    """The name the model file gets inside the bundle: its own, unless the bundle uses that name for its own
    files (a model called report.json would be overwritten by the report) or it would be hidden."""
    reserved = {name.casefold() for name in (MANIFEST, REPORT, REPORT_HTML)}
    if model.name.casefold() in reserved or model.name.startswith("."):
        return "model.onnx"
    return model.name


def carry_model(report: OptimizeReport, source: Path, folder: Path) -> Carried:
    """Put the chosen model into the bundle ``folder``: the file its backend converted it into with the
    ``.json`` that opens it with the ONNX interface (``Backend.conversion.carry``: LiteRT's ``.tflite``, MNN's
    ``.mnn``), so the bundle opens where nothing converts; else the model file itself."""
    from deploykit.backends.converted import Carried
    from deploykit.backends.registry import get_backend

    name = bundle_file_name(source)
    stem = Path(name).stem
    if f"{stem}.json".casefold() in {n.casefold() for n in (MANIFEST, REPORT)}:
        stem = "model"
    config = report.best.config
    backend = get_backend(config.backend)
    carried = backend.conversion.carry(backend.read_model(source), config.session_options(), folder, stem)
    if carried is not None:
        return carried
    shutil.copyfile(source, folder / name)
    return Carried(folder / name, (folder / name,))


WAIT_OPTION = "spinning"  # a backend option that lets idle threads spin (ONNX Runtime's): the wait policy
# Options whose runtime default decides speed when the device is busy: pinned as they ran.
_PINNED_DEFAULTS = (WAIT_OPTION,)


def pinned_options(backend: str, options: Mapping[str, Any], session: Any) -> dict[str, Any]:
    """The session options with what the search ran pinned: the compute precision the session
    reported (the device's default otherwise: bf16 on one CPU, f32 on another) and the wait policy's
    default, where the backend has those options."""
    from deploykit.backends.options import as_spec
    from deploykit.backends.registry import get_backend
    from deploykit.errors import DeployKitError
    from deploykit.tensors import normalize_precision

    pinned = dict(options)
    try:
        schema = get_backend(backend).options
    except DeployKitError:
        return pinned
    ran = None if session is None else session.precision
    if "precision" in schema and "precision" not in pinned and ran and ran not in ("int8", "device default"):
        pinned["precision"] = normalize_precision(ran)
    for name in _PINNED_DEFAULTS:
        if name in schema and name not in pinned and as_spec(schema[name]).default is not None:
            pinned[name] = as_spec(schema[name]).default
    return pinned


def build_manifest(
    report: OptimizeReport, model_file: str, model_sha256: str, pipeline: Mapping[str, Any], report_sha256: str
) -> BundleManifest:
    from deploykit._version import __version__

    best = report.best
    config = best.config
    interval, rounds = best.headline, best.rounds
    p90 = None
    if rounds:
        from deploykit.optimize.ranking import bootstrap_interval

        p90 = bootstrap_interval([[r.p90_ms] for r in rounds]).to_dict()
    median = (lambda values: sorted(values)[len(values) // 2]) if rounds else None
    verdict = best.verdict
    task = verdict.task if verdict is not None else None
    runtime = dict(report.device.get("runtimes", {}).get(config.backend, {}))
    return BundleManifest(
        model_file=model_file,
        model_sha256=model_sha256,
        variant=best.variant,
        source_model={"path": report.model.path, "sha256": report.model.sha256},
        backend=config.backend,
        device=config.device,
        precision=config.precision,
        threads=config.threads,
        batch=config.batch,
        options=pinned_options(config.backend, config.session_options(), best.session),
        scenario=config.scenario,
        inputs=[s.to_dict() for s in report.model.inputs],
        outputs=[s.to_dict() for s in report.model.outputs],
        task=pipeline.get("task"),
        preprocess=pipeline.get("preprocess"),
        labels=pipeline.get("labels"),
        verdict=None if verdict is None else verdict.to_dict(),
        accuracy={
            "metric": report.metric if task is not None else ("element-wise" if best.accuracy_delta == 0 else None),
            "delta": best.accuracy_delta,
            "images": report.settings.accuracy_images,
            "max_drop": report.settings.max_drop,
            "interval": None if best.accuracy_interval is None else best.accuracy_interval.to_dict(),
            **(
                {}
                if report.ground_truth is None
                else {
                    "top1_accuracy": best.top1_accuracy,
                    "reference_top1_accuracy": report.ground_truth.reference_top1_accuracy,
                    "classes": list(report.ground_truth.classes),
                }
            ),
        },
        latency={
            "headline": report.headline,
            "interval": None if interval is None else interval.to_dict(),
            "p50_ms": None if interval is None or report.headline != "p50_ms" else interval.to_dict(),
            "p90_ms": p90,
            "p99_ms": median([r.p99_ms for r in rounds]) if median else None,
            "throughput_sps": median([r.throughput_sps for r in rounds]) if median else None,
            "rounds": len(rounds),
        },
        why=report.decision.reason,
        rule=report.decision.rule,
        speedup=None
        if report.baseline is None
        else {"label": report.baseline.label, "speedup": report.baseline.speedup},
        session=None if best.session is None else best.session.to_dict(),
        fingerprint=dict(report.device),
        versions={"deploykit": __version__, "runtime": runtime.get("distributions") or []},
        files={model_file: model_sha256, REPORT: report_sha256},
        partial=report.partial,
        compute="" if best.session is None else best.session.precision_label,
        background_load=dict(report.settings.background_load),
        created=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    )


def write_bundle(
    output: str | os.PathLike[str],
    report: OptimizeReport,
    model: str | os.PathLike[str],
    pipeline: Mapping[str, Any],
    *,
    force: bool = False,
) -> Path:
    """Write the bundle folder all or nothing: staged beside ``output``, then renamed into place (a
    bundle replaced with ``force`` is moved aside first and removed after).

    Raises:
        OutputError: the folder cannot be written (``check_bundle_output``).
        ResourceError: the rename failed.
    """
    from deploykit.io import scratch_dir
    from deploykit.optimize.html import render_html

    target = Path(output)
    check_bundle_output(target, inputs=[report.model.path], force=force)
    with scratch_dir(target) as staging:
        folder = staging / "bundle"
        folder.mkdir()
        carried = carry_model(report, Path(model), folder)
        model_file = carried.model_file.name
        text = report.to_json()
        (folder / REPORT).write_text(text)
        page = render_html(report)
        (folder / REPORT_HTML).write_text(page)
        manifest = build_manifest(
            report, model_file, file_sha256(folder / model_file), pipeline, hashlib.sha256(text.encode()).hexdigest()
        )
        options = {k: v for k, v in manifest.options.items() if k not in carried.spent}
        files = {**{f.name: file_sha256(f) for f in carried.files}, **manifest.files}
        files[REPORT_HTML] = hashlib.sha256(page.encode()).hexdigest()
        manifest = dataclasses.replace(manifest, options=options, files=files)
        (folder / MANIFEST).write_text(json.dumps(manifest.to_dict(), indent=2, default=str))
        replaced = staging / "replaced"
        try:
            if target.is_dir():
                os.replace(target, replaced)
            os.replace(folder, target)
            remember_verified(target / model_file, manifest.model_sha256)
        except OSError as exc:
            if replaced.exists() and not target.exists():
                os.replace(replaced, target)
            raise ResourceError(
                f"-o '{target}' | cannot be written ({exc.strerror or exc}).",
                hint="check free space and permissions of its parent folder.",
            ) from exc
    return target
