"""Emulated targets: another architecture's Python, run under user-mode QEMU, as a worker.

A target lives in deploykit's cache (``<cache>/platforms/linux-arm64``)::

    sysroot/      Debian's python3 and the C++ runtime for the target, extracted (mmdebstrap)
    site/         the target's wheels: numpy, onnx and each runtime installed here (pip --target)
    source/       a copy of this deploykit package (pure Python), refreshed when the source changes
    target.json   the manifest, written last: a folder without it is half-built

``prepare`` does each step only if its own marker is missing (so an interrupted ``add`` resumes),
runs a self-test in the target, and writes the manifest. A worker then starts as
``qemu-aarch64 -L sysroot -cpu <cpu> sysroot/usr/bin/python3.11`` with the target's folders on
its path: the only thing a platform changes about the job protocol.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deploykit.cache import cache_dir
from deploykit.errors import DeployKitError, PlatformError
from deploykit.io import file_lock
from deploykit.platforms.base import Platform, PlatformStatus, RuntimeClaims
from deploykit.platforms.qemu import MIN_MAJOR, fetch_qemu, find_qemu, qemu_version
from deploykit.workers import Interpreter, run_worker

MANIFEST = "target.json"
COMPLETE = ".complete"
LOCK_NAME = ".lock"  # held while the target is prepared or its source copy refreshed
OFFERS = "offers.json"  # what each runtime claims, per emulated CPU (the probe's "offers"), keyed as it was probed
# Python, and the C/C++ runtimes numpy's and the runtimes' wheels link against (not bundled in them).
SYSROOT_PACKAGES = ("python3", "libstdc++6", "libgomp1")
SELF_TEST_TIMEOUT_S = 300.0


def _source_fingerprint(package: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            stat = path.stat()
            digest.update(f"{path.relative_to(package)}:{stat.st_size}:{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def _emulated_environment(name: str) -> dict[str, str]:
    """What the host's ``name`` backend says its worker needs under emulation (nothing when the host lacks it)."""
    from deploykit.backends.registry import get_backend

    try:
        backend = get_backend(name)
        return backend.runtime.emulated_environment() if backend.is_available() else {}
    except DeployKitError:
        return {}


@dataclass(frozen=True)
class EmulatedPlatform(Platform):
    """A Linux target of another architecture, run with user-mode QEMU.

    Attributes:
        name: ``linux/arm64``; ``linux/arm64:cortex-a72`` picks another emulated CPU.
        debian_arch: Debian's architecture name (``arm64``).
        suite: the Debian release the sysroot comes from (its Python is the target's).
        qemu_arch: ``aarch64`` in ``qemu-aarch64``.
        wheel_arch: the wheels' platform-tag architecture (``aarch64``).
        glibc_minor: the suite's glibc 2.N (the newest manylinux tag its wheels may carry).
        cpu: the CPU QEMU emulates (``-cpu``): the kernels a runtime picks depend on its features.
    """

    name: str
    debian_arch: str
    suite: str
    qemu_arch: str
    wheel_arch: str
    glibc_minor: int
    cpu: str
    emulated = True

    @property
    def base_name(self) -> str:
        return self.name.partition(":")[0]

    def with_cpu(self, cpu: str) -> EmulatedPlatform:
        return dataclasses.replace(self, name=f"{self.base_name}:{cpu}", cpu=cpu)

    def folder(self) -> Path:
        return cache_dir() / "platforms" / self.base_name.replace("/", "-")

    def manifest(self) -> dict[str, Any] | None:
        """The manifest a completed ``prepare`` wrote, or None."""
        path = self.folder() / MANIFEST
        try:
            data: dict[str, Any] = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        return data

    def state(self) -> str:
        if self.manifest() is not None:
            return "ready"
        return "half-built" if self.folder().exists() else "absent"

    def _python(self, sysroot: Path) -> Path:
        found = [p for p in sysroot.glob("usr/bin/python3.[0-9]*") if p.name[6:].replace(".", "").isdigit()]
        found.sort(key=lambda p: [int(x) for x in p.name[6:].split(".")])
        if not found:
            raise PlatformError(
                f"platform '{self.base_name}' | the sysroot {sysroot} has no usr/bin/python3.N; expected Debian "
                f"{self.suite}'s python3 for {self.debian_arch}.",
                hint=f"deploykit platforms remove {self.base_name} && deploykit platforms add {self.base_name}.",
            )
        return found[-1]

    def prepare(self, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
        """Build (or finish, or refresh) the target; return its manifest. Steps already complete are
        kept, so a second call costs only the self-test.

        Raises:
            PlatformError: no QEMU >= 8 and none can be fetched, no sysroot tool, no wheel for
                numpy/onnx, or the self-test failed in the target.
        """
        say = progress or (lambda _text: None)
        folder = self.folder()
        seconds: dict[str, float] = {}
        with file_lock(folder / LOCK_NAME):
            (folder / MANIFEST).unlink(missing_ok=True)
            (folder / OFFERS).unlink(missing_ok=True)
            started = time.perf_counter()
            cache = cache_dir()
            try:
                qemu = find_qemu(self.qemu_arch, cache)
            except PlatformError as missing:
                if os.environ.get(f"DEPLOYKIT_QEMU_{self.qemu_arch.upper()}"):
                    raise
                say(f"extracting Debian's qemu-user (QEMU >= {MIN_MAJOR}) into {cache}")
                archs = {p.qemu_arch for p in TARGETS.values()}
                try:
                    fetch_qemu(cache, archs)
                except PlatformError as exc:
                    raise PlatformError(f"{missing.message} {exc.message}", hint=exc.hint) from exc
                qemu = find_qemu(self.qemu_arch, cache)
            seconds["qemu"] = time.perf_counter() - started

            started = time.perf_counter()
            sysroot = folder / "sysroot"
            if not (sysroot / COMPLETE).exists():
                from deploykit.platforms.debian import extract_packages

                say(f"extracting Debian {self.suite} {self.debian_arch}: {', '.join(SYSROOT_PACKAGES)}")
                extract_packages(
                    sysroot, self.suite, self.debian_arch, SYSROOT_PACKAGES, what=f"the {self.base_name} sysroot"
                )
                (sysroot / COMPLETE).write_text(json.dumps(list(SYSROOT_PACKAGES)))
            python = self._python(sysroot)
            python_version = python.name[len("python") :]
            seconds["sysroot"] = time.perf_counter() - started

            started = time.perf_counter()
            packages = self._install_wheels(folder / "site", python_version, say)
            seconds["wheels"] = time.perf_counter() - started

            started = time.perf_counter()
            self._sync_source(folder)
            manifest: dict[str, Any] = {
                "platform": self.base_name,
                "cpu": self.cpu,
                "qemu": {"path": str(qemu.path), "version": qemu.version_text},
                "suite": self.suite,
                "python": str(python.relative_to(sysroot)),
                "python_version": python_version,
                "packages": packages,
            }
            say(f"self-test in the target (qemu-{self.qemu_arch} {qemu.version_text}, -cpu {self.cpu})")
            probe = self._probe(self._interpreter(manifest), [p["backend"] for p in packages if p["backend"]])
            seconds["self_test"] = time.perf_counter() - started
            manifest["probe"] = probe
            manifest["seconds"] = {k: round(v, 2) for k, v in seconds.items()}
            (folder / MANIFEST).write_text(json.dumps(manifest, indent=2))
        self._keep_offers(probe, manifest)
        return manifest

    def _install_wheels(self, site: Path, python_version: str, say: Callable[[str], None]) -> list[dict[str, Any]]:
        from deploykit.platforms.wheels import host_requirements, install, platform_tags

        requirements = host_requirements()
        tags = platform_tags(self.wheel_arch, self.glibc_minor)
        key = json.dumps({"python": python_version, "tags": tags, "requirements": [r.pinned for r in requirements]})
        marker = site / COMPLETE
        if marker.exists():
            recorded = json.loads(marker.read_text())
            if recorded.get("key") == key:
                packages: list[dict[str, Any]] = recorded["packages"]
                return packages
        say(f"installing {self.wheel_arch} wheels: {', '.join(r.pinned for r in requirements)}")
        resolved = install(site, requirements, tags, python_version)
        packages = [r.to_dict() for r in resolved]
        marker.write_text(json.dumps({"key": key, "packages": packages}))
        return packages

    def _sync_source(self, folder: Path) -> Path:
        """The target's copy of this deploykit package, copied again when the source changed."""
        package = Path(__file__).resolve().parents[1]  # deploykit/, found without importing the package top
        source = folder / "source"
        fingerprint = _source_fingerprint(package)
        marker = source / COMPLETE
        if marker.exists() and marker.read_text() == fingerprint:
            return source
        partial = folder / "source.partial"
        shutil.rmtree(partial, ignore_errors=True)
        shutil.copytree(package, partial / "deploykit", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        (partial / COMPLETE).write_text(fingerprint)
        shutil.rmtree(source, ignore_errors=True)
        partial.rename(source)
        return source

    def _interpreter(self, manifest: dict[str, Any]) -> Interpreter:
        folder = self.folder()
        sysroot = folder / "sysroot"
        qemu = Path(manifest["qemu"]["path"])
        if not qemu.exists():
            raise PlatformError(
                f"platform '{self.base_name}' | its QEMU {qemu} is gone; expected the one 'platforms add' found.",
                hint=f"deploykit platforms add {self.base_name}.",
            )
        paths = [str(folder / "source"), str(folder / "site")]
        if os.environ.get("PYTHONPATH"):  # plug-in backends named in DEPLOYKIT_BACKENDS (pure Python)
            paths.append(os.environ["PYTHONPATH"])
        # the host's user site-packages hold host-architecture builds: never on the target's path
        environment = {"PYTHONPATH": os.pathsep.join(paths), "PYTHONNOUSERSITE": "1"}
        for backend in {p["backend"] for p in manifest["packages"] if p["backend"]}:
            environment.update(_emulated_environment(backend))
        return Interpreter(
            command=(str(qemu), "-L", str(sysroot), "-cpu", self.cpu, str(sysroot / manifest["python"])),
            environment=environment,
            platform=self.name,
        )

    def interpreter(self) -> Interpreter:
        manifest = self.manifest()
        if manifest is None:
            state = self.state()
            problem = "was never prepared" if state == "absent" else "is half-built (an interrupted 'platforms add')"
            raise PlatformError(
                f"platform '{self.base_name}' | {problem} in {self.folder()}; expected a target made by "
                "'deploykit platforms add'.",
                hint=f"deploykit platforms add {self.base_name} (needs mmdebstrap and access to Debian and PyPI; "
                "a few minutes, once).",
            )
        with file_lock(self.folder() / LOCK_NAME):
            self._sync_source(self.folder())
        return self._interpreter(manifest)

    def _offers_key(self, manifest: dict[str, Any]) -> str:
        """What the runtimes' claims depend on: the emulated CPU, the installed builds, deploykit's source."""
        source = self.folder() / "source" / COMPLETE
        fingerprint = source.read_text() if source.exists() else ""
        return json.dumps([self.cpu, manifest["qemu"]["version"], manifest["packages"], fingerprint])

    def _keep_offers(self, probe: dict[str, Any], manifest: dict[str, Any]) -> None:
        path = self.folder() / OFFERS
        try:
            kept = json.loads(path.read_text())
        except (OSError, ValueError):
            kept = {}
        kept[self.cpu] = {"key": self._offers_key(manifest), "offers": probe.get("offers") or {}}
        partial = path.with_name(f"{OFFERS}.{os.getpid()}.{threading.get_ident()}.partial")  # threads probe too
        partial.write_text(json.dumps(kept, indent=2))
        os.replace(partial, path)

    def offers(self) -> dict[str, Any]:
        """Backend → what the target's build claims on the emulated CPU (the probe's ``offers``): probed
        once per CPU and kept in the target's folder until the target, the CPU or deploykit changes.

        Raises:
            PlatformError: the target is not prepared, or the probe did not run in it.
        """
        interpreter = self.interpreter()
        manifest = self.manifest() or {}
        try:
            kept = json.loads((self.folder() / OFFERS).read_text()).get(self.cpu) or {}
        except (OSError, ValueError):
            kept = {}
        if kept.get("key") == self._offers_key(manifest):
            offers: dict[str, Any] = kept["offers"]
            return offers
        probe = self._probe(interpreter, [p["backend"] for p in manifest["packages"] if p["backend"]])
        self._keep_offers(probe, manifest)
        return dict(probe.get("offers") or {})

    def claims(self, backend: str, device: str) -> RuntimeClaims | None:
        found = self.offers().get(backend)
        if found is None:
            return None
        devices = {name.lower(): claims for name, claims in found["devices"].items()}
        claimed = devices.get(device.lower())
        if claimed is None:
            return None
        return RuntimeClaims(tuple(claimed["precisions"]), dict(claimed["model_precision"]))

    def _probe(self, interpreter: Interpreter, backends: list[str]) -> dict[str, Any]:
        outcome = run_worker(
            "deploykit.platforms.probe", {"backends": backends}, timeout_s=SELF_TEST_TIMEOUT_S, interpreter=interpreter
        )
        if outcome.result is None:
            raise PlatformError(
                f"platform '{self.base_name}' | the self-test in the target {outcome.error}; expected it to print the "
                "emulated CPU and the runtimes' versions.",
                hint=f"deploykit platforms remove {self.base_name} && deploykit platforms add {self.base_name}.",
            )
        return outcome.result

    def status(self, *, self_test: bool = True) -> PlatformStatus:
        manifest = self.manifest()
        if manifest is None:
            state = self.state()
            detail = "interrupted 'platforms add': run it again to finish" if state == "half-built" else "not added"
            return PlatformStatus(self.name, state, cpu=self.cpu, detail=detail)
        version = qemu_version(manifest["qemu"]["path"])
        emulator = f"qemu-{self.qemu_arch} {manifest['qemu']['version']}"
        substituted = [
            f"{p['distribution']} {p['version']} (host {p['host_version']}: {p['reason']})"
            for p in manifest["packages"]
            if p["version"] and not p["exact"]
        ]
        missing = [f"{p['distribution']}: {p['reason']}" for p in manifest["packages"] if not p["version"]]
        details = [f"nearest: {'; '.join(substituted)}"] if substituted else []
        details += [f"missing: {'; '.join(missing)}"] if missing else []
        probe = manifest.get("probe") or {}
        state = "ready"
        if version is None:
            state, details = "broken", [f"its QEMU {manifest['qemu']['path']} no longer runs", *details]
        elif self_test:
            try:
                probe = self._probe(self.interpreter(), [p["backend"] for p in manifest["packages"] if p["backend"]])
                self._keep_offers(probe, manifest)
            except PlatformError as exc:
                state, details = "broken", [str(exc), *details]
        runtimes = dict(probe.get("backends") or {})
        for backend, offer in (probe.get("offers") or {}).items():  # the default device's native precisions
            claimed = (offer.get("devices") or {}).get(offer.get("default_device")) or {}
            if claimed.get("precisions") and backend in runtimes:
                runtimes[backend] += f" ({', '.join(claimed['precisions'])})"
        features = probe.get("features") or ""
        return PlatformStatus(
            self.name,
            state,
            cpu=f"{self.cpu} ({probe.get('machine', '?')}: {features})" if features else self.cpu,
            emulator=emulator,
            python=str(probe.get("python") or manifest["python_version"]),
            runtimes=runtimes,
            detail="; ".join(details),
        )

    def remove(self) -> bool:
        """Delete the target's folder; False when there was none."""
        folder = self.folder()
        if not folder.exists():
            return False
        shutil.rmtree(folder)
        return True

    def describe(self) -> str:
        manifest = self.manifest() or {}
        qemu = (manifest.get("qemu") or {}).get("version", "?")
        return f"{self.base_name} (emulated {self.cpu}, qemu-{self.qemu_arch} {qemu})"


TARGETS: dict[str, EmulatedPlatform] = {
    # Raspberry Pi 5-class core (ARMv8.2: fp16 arithmetic, dot product); bookworm: Python 3.11, glibc 2.36
    "linux/arm64": EmulatedPlatform("linux/arm64", "arm64", "bookworm", "aarch64", "aarch64", 36, "cortex-a76"),
    # riscv64 is a Debian release architecture from trixie on: Python 3.13, glibc 2.41
    "linux/riscv64": EmulatedPlatform("linux/riscv64", "riscv64", "trixie", "riscv64", "riscv64", 41, "rv64"),
}
"""The emulated targets by name (``deploykit.platforms.PLATFORMS`` adds the host)."""
