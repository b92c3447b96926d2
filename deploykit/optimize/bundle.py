"""The bundle ``optimize`` writes and every opener reads: a folder with the chosen model file,
``deploykit.json`` (what to open, how, and on what evidence) and ``report.json`` (every candidate).

``read_bundle`` is the one reader (``load``, the pipelines, ``predict``, ``bench`` and ``serve`` go
through it); ``open_bundle`` opens exactly the chosen configuration, checking the model's SHA-256
beside the session load so a bundle costs no more to open than its model. Writing is all or
nothing: the folder is staged beside the target and renamed into place.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import os
import shutil
import threading
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deploykit.errors import BundleError, ModelNotFoundError, OutputError, UsageError
from deploykit.io import file_sha256
from deploykit.optimize.verified import remember_verified, verified_before

if TYPE_CHECKING:
    from deploykit.backends.base import Session
    from deploykit.optimize.results import OptimizeReport

SCHEMA = "deploykit.bundle"
SCHEMA_VERSION = 1
MANIFEST = "deploykit.json"
REPORT = "report.json"
RECHECK = "deploykit bench {path} --recheck"
# what makes "another machine" for a latency ranking: the CPU, its features and how many cores
_MACHINE_KEYS = ("model", "architecture", "flags", "logical_cores")


class BundleWarning(UserWarning):
    """The bundle was chosen on another machine or with other runtime versions: its ranking may not hold here."""


@dataclass(frozen=True)
class BundleManifest:
    """``deploykit.json``: what the bundle opens and the evidence for it.

    Attributes:
        model_file, model_sha256: the chosen model file (a plain name in the folder) and its hash.
        variant: ``float``, ``int8-ort``, ``int8-nncf`` or ``fp16``.
        source_model: the float model searched (path, SHA-256).
        backend, device, precision, threads, batch, options: the configuration to open
            (``options`` are the session options, threads and precision included).
        scenario: ``singlestream`` or ``offline``.
        inputs, outputs: the model's interface (``TensorSpec.to_dict``).
        task, preprocess, labels: the pipeline (``detect``/``classify``), its pre-processing and names.
        verdict: the verification of the chosen configuration (with its oracle).
        accuracy: metric, delta, images, max_drop.
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


@dataclass(frozen=True)
class Bundle:
    """A bundle folder as read by ``read_bundle``.

    Attributes:
        path: the folder.
        manifest: its ``deploykit.json``.
        elsewhere: why the choice may not hold here (another machine, other versions); empty when it does.
    """

    path: Path
    manifest: BundleManifest
    elsewhere: tuple[str, ...] = field(default_factory=tuple)

    @property
    def model_path(self) -> Path:
        return self.path / self.manifest.model_file

    @property
    def options(self) -> dict[str, Any]:
        """The session options of the chosen configuration (threads and precision included)."""
        return dict(self.manifest.options)

    def report(self) -> OptimizeReport:
        """The full optimize report (``report.json``): every candidate."""
        from deploykit.optimize.results import OptimizeReport

        try:
            return OptimizeReport.from_dict(json.loads((self.path / REPORT).read_text()))
        except (OSError, ValueError) as exc:
            raise BundleError(
                f"bundle '{self.path}' | {REPORT} cannot be read ({exc}).",
                hint="run deploykit optimize again to rewrite the bundle.",
            ) from exc

    def verify_model(self) -> None:
        """Check the model file's SHA-256 against the manifest. A file already verified, and not
        changed since (same device, inode, size, mtime and ctime), is not hashed again: see
        ``verified_before``.

        Raises:
            BundleError: the file changed since the bundle was written.
        """
        if verified_before(self.model_path, self.manifest.model_sha256):
            return
        found = file_sha256(self.model_path)
        if found == self.manifest.model_sha256:
            remember_verified(self.model_path, found)
        else:
            raise BundleError(
                f"bundle '{self.path}' | model '{self.manifest.model_file}' has SHA-256 {found[:16]}…, the bundle "
                f"recorded {self.manifest.model_sha256[:16]}…: the file was changed or replaced.",
                hint="restore the bundle's model file, or run deploykit optimize again.",
            )

    def warn_if_elsewhere(self) -> None:
        if self.elsewhere:
            warnings.warn(elsewhere_message(self), BundleWarning, stacklevel=3)


def elsewhere_message(bundle: Bundle) -> str:
    return (
        f"bundle '{bundle.path}' was chosen elsewhere ({'; '.join(bundle.elsewhere)}): its ranking may not "
        f"hold here; measure it again with '{RECHECK.format(path=bundle.path)}'"
    )


def _cpu_here() -> dict[str, Any]:
    """The machine keys of ``fingerprint.cpu_info`` without its slow parts (psutil, governor)."""
    import platform

    from deploykit.bench.fingerprint import _FLAGS_OF_INTEREST, _read

    model, flags = None, set()
    for line in (_read("/proc/cpuinfo") or "").splitlines():
        key, _, value = line.partition(":")
        key = key.strip().lower()
        if key in ("model name", "hardware", "cpu model") and not model:
            model = value.strip()
        elif key in ("flags", "features"):
            flags.update(value.split())
    return {
        "model": model or platform.processor() or platform.machine(),
        "architecture": platform.machine(),
        "flags": sorted(f for f in flags if f in _FLAGS_OF_INTEREST),
        "logical_cores": os.cpu_count(),
    }


def machine_differences(recorded: Mapping[str, Any]) -> list[str]:
    """What differs between the recorded fingerprint's CPU and this machine's."""
    here, there = _cpu_here(), dict(recorded.get("cpu") or {})
    found = []
    for key in _MACHINE_KEYS:
        if key in there and there[key] != here[key]:
            if key == "flags":
                gone = sorted(set(there[key]) - set(here[key]))
                new = sorted(set(here[key]) - set(there[key]))
                change = ", ".join([*(f"-{f}" for f in gone), *(f"+{f}" for f in new)])
                found.append(f"CPU flags differ ({change})")
            else:
                found.append(f"{key.replace('_', ' ')} {there[key]!r} there, {here[key]!r} here")
    return found


def is_bundle(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a folder (a bundle or meant as one: the readers then say what is missing)."""
    return os.path.isdir(path)


def read_bundle(path: str | os.PathLike[str], *, verify: bool = True) -> Bundle:
    """Read and check a bundle folder: the one reader of bundles.

    Args:
        path: the folder ``deploykit optimize -o`` wrote.
        verify: check the model file's SHA-256 now (``open_bundle`` checks it beside the load instead).

    Raises:
        ModelNotFoundError: no such folder.
        BundleError: no ``deploykit.json``, an unreadable one, another schema or version, a model file
            missing, outside the folder or with another SHA-256.
    """
    folder = Path(path)
    if not folder.is_dir():
        raise ModelNotFoundError(
            f"bundle '{folder}' | no such folder.", hint="pass the folder deploykit optimize -o wrote."
        )
    manifest_path = folder / MANIFEST
    hint = "pass a folder written by 'deploykit optimize -o', or the path of an .onnx file."
    if not manifest_path.is_file():
        raise BundleError(
            f"bundle '{folder}' | is a folder without {MANIFEST}, expected a deploykit bundle.", hint=hint
        )
    try:
        data = json.loads(manifest_path.read_text())
    except (OSError, ValueError) as exc:
        raise BundleError(f"bundle '{folder}' | {MANIFEST} cannot be read as JSON ({exc}).", hint=hint) from exc
    if not isinstance(data, dict):
        raise BundleError(f"bundle '{folder}' | {MANIFEST} holds {type(data).__name__}, expected an object.", hint=hint)
    try:
        manifest = BundleManifest.from_dict(data, str(manifest_path))
    except TypeError as exc:
        raise BundleError(f"bundle '{folder}' | {MANIFEST} has fields of the wrong kind ({exc}).", hint=hint) from exc
    name = manifest.model_file
    if not isinstance(name, str) or not name or Path(name).name != name or name in (".", ".."):
        raise BundleError(
            f"bundle '{folder}' | names the model file {name!r}, expected a file name inside the folder.",
            hint="a bundle's files live in its folder; run deploykit optimize again.",
        )
    for listed in manifest.files:
        file = folder / listed
        if Path(listed).name != listed or not file.is_file() or file.is_symlink():
            problem = "is missing" if not file.exists() else "is not a plain file inside the folder"
            raise BundleError(
                f"bundle '{folder}' | its file '{listed}' {problem}.",
                hint="copy the whole bundle folder, or run deploykit optimize again.",
            )
    if name not in manifest.files:
        raise BundleError(
            f"bundle '{folder}' | lists files {', '.join(manifest.files)} but not its model '{name}'.",
            hint="run deploykit optimize again.",
        )
    bundle = Bundle(folder, manifest, tuple(machine_differences(manifest.fingerprint)))
    if verify:
        bundle.verify_model()
    return bundle


def chosen_options(
    bundle: Bundle, backend: str | None, device: str | None, options: Mapping[str, Any]
) -> dict[str, Any]:
    """The bundle's options with ``options`` added; asking for another backend, device or a chosen
    option's other value is a ``UsageError`` (``open_bundle`` and ``serve`` ask this)."""
    from deploykit.backends.registry import canonical_name

    manifest = bundle.manifest
    hint = (
        f"a bundle opens the configuration it chose; open '{bundle.model_path}' itself to run another, or "
        "run deploykit optimize again."
    )
    if backend is not None and canonical_name(backend) != manifest.backend:
        raise UsageError(f"bundle '{bundle.path}' | chose backend {manifest.backend}; asked for {backend}.", hint=hint)
    if device is not None and manifest.device is not None and device.lower() != manifest.device.lower():
        raise UsageError(f"bundle '{bundle.path}' | chose device {manifest.device}; asked for {device}.", hint=hint)
    merged = bundle.options
    for key, value in options.items():
        if key in merged and merged[key] != value:
            raise UsageError(
                f"bundle '{bundle.path}' | chose {key}={merged[key]!r}; asked for {key}={value!r}.", hint=hint
            )
        merged[key] = value
    return merged


def open_bundle(
    path: str | os.PathLike[str],
    *,
    backend: str | None = None,
    device: str | None = None,
    allow_fallback: bool = False,
    **options: Any,
) -> Session:
    """Open a bundle's chosen configuration: its model file on its backend, device, precision and
    threads. The model's SHA-256 is checked while the session loads; another machine or runtime
    version gives a ``BundleWarning`` naming ``deploykit bench PATH --recheck``.

    Raises:
        BundleError: see ``read_bundle``; a model whose SHA-256 does not match.
        UsageError: another backend, device or value of a chosen option was asked for.
    """
    from deploykit.backends.registry import get_backend

    bundle = read_bundle(path, verify=False)
    settings = chosen_options(bundle, backend, device, options)
    failure: list[BaseException] = []

    def verify() -> None:
        try:
            bundle.verify_model()
        except BaseException as exc:  # handed to the opening thread
            failure.append(exc)

    checker = threading.Thread(target=verify, name="deploykit-bundle-sha256", daemon=True)
    checker.start()  # hashing releases the GIL: it runs while the runtime loads the model
    session: Session | None = None
    load_error: BaseException | None = None
    try:
        session = get_backend(bundle.manifest.backend).open(
            bundle.model_path, bundle.manifest.device, allow_fallback=allow_fallback, **settings
        )
    except BaseException as exc:  # a tampered file may fail to load: the hash says why
        load_error = exc
    finally:
        checker.join()
    if failure:
        if session is not None:
            session.close()
        raise failure[0] from load_error
    if load_error is not None or session is None:
        raise load_error or BundleError(f"bundle '{bundle.path}' | did not open.", hint="run deploykit optimize again.")
    recorded = (bundle.manifest.session or {}).get("backend_version")
    elsewhere = list(bundle.elsewhere)
    if recorded and session.info.backend_version and recorded != session.info.backend_version:
        elsewhere.append(f"runtime {recorded} there, {session.info.backend_version} here")
    if elsewhere:
        warnings.warn(
            elsewhere_message(Bundle(bundle.path, bundle.manifest, tuple(elsewhere))), BundleWarning, stacklevel=3
        )
    return session


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
    parent = resolved.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        problem = "does not exist" if not parent.exists() else "is not a writable folder"
        raise OutputError(
            f"-o '{target}' | its parent '{parent}' {problem}.",
            hint="create the parent folder, or choose a folder you can write to.",
        )


def _manifest(
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
        options=config.session_options(),
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
        OutputError: the folder cannot be written (``check_bundle_output``), or the rename failed.
    """
    from deploykit.io import scratch_dir

    target = Path(output)
    check_bundle_output(target, inputs=[report.model.path], force=force)
    with scratch_dir(target) as staging:
        folder = staging / "bundle"
        folder.mkdir()
        source = Path(model)
        shutil.copyfile(source, folder / source.name)
        text = report.to_json()
        (folder / REPORT).write_text(text)
        manifest = _manifest(
            report, source.name, file_sha256(folder / source.name), pipeline, hashlib.sha256(text.encode()).hexdigest()
        )
        (folder / MANIFEST).write_text(json.dumps(manifest.to_dict(), indent=2, default=str))
        replaced = staging / "replaced"
        try:
            if target.is_dir():
                os.replace(target, replaced)
            os.replace(folder, target)
            remember_verified(target / source.name, manifest.model_sha256)
        except OSError as exc:
            if replaced.exists() and not target.exists():
                os.replace(replaced, target)
            raise OutputError(
                f"-o '{target}' | cannot be written ({exc.strerror or exc}).",
                hint="check free space and permissions of its parent folder.",
            ) from exc
    return target
