"""Opening the bundle ``optimize`` writes: a folder with the chosen model file, ``deploykit.json``
(what to open, how, and on what evidence: ``manifest``), ``report.json`` (every candidate) and
``report.html`` (the same with the Pareto front drawn).

``read_bundle`` is the one reader (``load``, the pipelines, ``predict``, ``bench`` and ``serve`` go
through it); ``open_bundle`` opens exactly the chosen configuration, checking the model's SHA-256
beside the session load so a bundle costs no more to open than its model; ``bundle_configuration``
gives that configuration to openers elsewhere (Ray actors). Writing is ``manifest.write_bundle``.
"""

from __future__ import annotations

import json
import os
import threading
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deploykit.errors import BundleError, ModelNotFoundError, UsageError
from deploykit.io import file_sha256
from deploykit.optimize.manifest import (
    MANIFEST,
    REPORT,
    REPORT_HTML,
    SCHEMA,
    SCHEMA_VERSION,
    BundleManifest,
    check_bundle_output,
    write_bundle,
)
from deploykit.optimize.verified import remember_verified, verified_before

if TYPE_CHECKING:
    from deploykit.backends.base import Session
    from deploykit.optimize.results import OptimizeReport

RECHECK = "deploykit bench {path} --recheck"
# what makes "another machine" for a latency ranking: the CPU, its features and how many cores
_MACHINE_KEYS = ("model", "architecture", "flags", "logical_cores")

__all__ = [
    "MANIFEST",
    "RECHECK",
    "REPORT",
    "REPORT_HTML",
    "SCHEMA",
    "SCHEMA_VERSION",
    "Bundle",
    "BundleManifest",
    "BundleWarning",
    "bundle_configuration",
    "check_bundle_output",
    "elsewhere_message",
    "is_bundle",
    "machine_differences",
    "open_bundle",
    "read_bundle",
    "write_bundle",
]


class BundleWarning(UserWarning):
    """The bundle was chosen on another machine or with other runtime versions: its ranking may not hold here."""


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
        """The full optimize report (``report.json``): every candidate.

        Raises:
            BundleError: the file cannot be read, or its SHA-256 is not the one the manifest recorded.
        """
        import hashlib

        from deploykit.optimize.results import OptimizeReport

        try:
            data = (self.path / REPORT).read_bytes()
            recorded = self.manifest.files.get(REPORT)
            if recorded and hashlib.sha256(data).hexdigest() != recorded:
                raise BundleError(
                    f"bundle '{self.path}' | {REPORT} has another SHA-256 than the bundle recorded: the file was "
                    "changed or replaced.",
                    hint="restore the bundle's report.json, or run deploykit optimize again.",
                )
            return OptimizeReport.from_dict(json.loads(data))
        except (OSError, ValueError, RecursionError) as exc:
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
        self._verify_companions()
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

    def _verify_companions(self) -> None:
        """The files that open with the model (the ``.json`` beside a converted ``.tflite`` or ``.mnn``:
        its names and layout), against the SHA-256 the manifest recorded."""
        for name, recorded in self.manifest.files.items():
            if name in (self.manifest.model_file, REPORT, REPORT_HTML):
                continue
            found = file_sha256(self.path / name)
            if found != recorded:
                raise BundleError(
                    f"bundle '{self.path}' | '{name}' has SHA-256 {found[:16]}…, the bundle recorded {recorded[:16]}…: "
                    "the file was changed or replaced.",
                    hint="restore the bundle's files, or run deploykit optimize again.",
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
    except RecursionError:  # a file nested deeper than any manifest is (the parser's stack ends first)
        raise BundleError(
            f"bundle '{folder}' | {MANIFEST} is nested too deeply to be a bundle's manifest.", hint=hint
        ) from None
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


def bundle_configuration(
    path: str | os.PathLike[str], *, backend: str | None = None, device: str | None = None, **options: Any
) -> tuple[Path, str, str | None, dict[str, Any]]:
    """What a bundle opens, for whoever opens it elsewhere (the Ray actors of batch inference): its
    checked model file, backend, device and session options (threads and precision included).

    Raises:
        BundleError: see ``read_bundle``. UsageError: another backend, device or option value was asked for.
    """
    bundle = read_bundle(path)
    bundle.warn_if_elsewhere()
    settings = chosen_options(bundle, backend, device, options)
    return bundle.model_path, bundle.manifest.backend, bundle.manifest.device, settings


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
