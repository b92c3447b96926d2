"""The target's Python packages: the host's versions of numpy, onnx and each runtime, as wheels
built for the target (``pip install --platform ... --target``), their dependencies constrained to the
host's versions too; another version only where the index has no wheel of the host's for the target,
recorded with the reason (``platforms list`` shows it as "nearest").

Nothing here runs the target's Python: pip on the host downloads and unpacks the wheels.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from deploykit.errors import PlatformError

# deploykit's own dependencies that its workers import (typer and rich are the CLI's).
CORE_DISTRIBUTIONS = ("numpy", "onnx")


@dataclass(frozen=True)
class Requirement:
    """One package the target needs: which, for whom, and the host's version to match."""

    distribution: str
    host_version: str | None
    backend: str | None = None

    @property
    def pinned(self) -> str:
        return f"{self.distribution}=={self.host_version}" if self.host_version else self.distribution


@dataclass(frozen=True)
class Resolved:
    """What the target got for a requirement: the host's version, the nearest one, or nothing."""

    requirement: Requirement
    version: str | None
    reason: str = ""

    @property
    def exact(self) -> bool:
        return self.version is not None and self.version == self.requirement.host_version

    def to_dict(self) -> dict[str, Any]:
        return {
            "distribution": self.requirement.distribution,
            "backend": self.requirement.backend,
            "host_version": self.requirement.host_version,
            "version": self.version,
            "exact": self.exact,
            "reason": self.reason,
        }


def _installed(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def host_requirements() -> list[Requirement]:
    """numpy and onnx, then every available backend's runtime (its CPU build), at the host's versions:
    the default candidates' and those searched once the user has made them ready (LiteRT, whose
    ``.tflite`` files run in the target without the converter environment).

    Backends that only serve as oracles (``reference``) run on the host and are left out.
    """
    from deploykit.backends.registry import backend_names, get_backend

    requirements = [Requirement(name, _installed(name)) for name in CORE_DISTRIBUTIONS]
    for name in backend_names():
        backend = get_backend(name)
        if not (backend.search.default_candidate or backend.search.searched_when_ready) or not backend.is_available():
            continue
        installed = [d for d in backend.runtime.packages() if _installed(d)]
        if not installed:
            continue
        if backend.runtime.cpu_distribution:  # one runtime in several builds (onnxruntime-gpu → onnxruntime)
            requirements.append(Requirement(backend.runtime.cpu_distribution, _installed(installed[0]), name))
            continue
        # every installed distribution the backend names: a runtime may need several (ncnn and pnnx)
        requirements += [Requirement(d, _installed(d), name) for d in installed]
    return requirements


def platform_tags(wheel_arch: str, glibc_minor: int) -> list[str]:
    """Every manylinux tag a target with glibc 2.``glibc_minor`` accepts, newest first."""
    tags = [f"manylinux_2_{minor}_{wheel_arch}" for minor in range(glibc_minor, 16, -1)]
    return [*tags, f"manylinux2014_{wheel_arch}", f"linux_{wheel_arch}"]


# What pip prints when an index has no distribution of a version for the target (and only then).
_NO_SUCH_VERSION = ("No matching distribution found", "Could not find a version that satisfies")


def host_constraints() -> list[str]:
    """``name==version`` of every distribution installed on the host: the target's dependencies
    (protobuf, ml-dtypes, sympy, ...) take the host's versions too, not whatever the index serves today."""
    pins = {}
    for distribution in metadata.distributions():
        name = distribution.metadata["Name"]
        if name and distribution.version:
            pins[_normal(name)] = f"{name}=={distribution.version}"
    return [pins[key] for key in sorted(pins)]


def _pip(tags: Sequence[str], python: str, arguments: Sequence[str]) -> subprocess.CompletedProcess[str]:
    abi = "cp" + python.replace(".", "")
    command = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        "--no-warn-conflicts",
        "--only-binary=:all:",
        "--python-version",
        python,
        "--implementation",
        "cp",
        "--abi",
        abi,
    ]
    for tag in tags:
        command += ["--platform", tag]
    # pip's own temporary folders (builds, unpacked wheels) go into one folder of ours, removed however
    # this ends: a SIGTERM kills pip before it cleans up, and it left dozens of them in TMPDIR.
    with tempfile.TemporaryDirectory(prefix="deploykit-pip-tmp-") as own:
        environment = {**os.environ, "TMPDIR": own, "TEMP": own, "TMP": own}
        return subprocess.run([*command, *arguments], capture_output=True, text=True, timeout=3600, env=environment)


def _pip_failure(done: subprocess.CompletedProcess[str], what: str) -> PlatformError:
    tail = " | ".join(line.strip() for line in done.stderr.strip().splitlines()[-3:])
    if "No space left on device" in done.stderr or "Errno 28" in done.stderr:  # not the index's fault
        return PlatformError(
            f"target packages | pip could not install {what}: the disk is full ({tail}).",
            hint="free some space where deploykit's cache lives (DEPLOYKIT_CACHE_DIR) and in TMPDIR, "
            "then run 'deploykit platforms add' again.",
        )
    return PlatformError(
        f"target packages | pip could not install {what} ({tail}); expected wheels for the target's platform tags.",
        hint="check access to the package index (pip config), then run 'deploykit platforms add' again.",
    )


def _available_version(tags: Sequence[str], python: str, requirement: str) -> str | None:
    """The version pip would install for ``requirement`` on the target; None only when the index has
    no wheel of it for the target.

    Raises:
        PlatformError: pip failed for another reason (the index unreachable, a broken pip): a version
            that might exist is never replaced by another because of it.
    """
    with tempfile.TemporaryDirectory(prefix="deploykit-pip-") as scratch:
        report = Path(scratch) / "report.json"
        arguments = ["--dry-run", "--ignore-installed", "--no-deps", "--report", str(report), requirement]
        done = _pip(tags, python, arguments)
        if done.returncode != 0:
            if any(text in done.stderr for text in _NO_SUCH_VERSION):
                return None
            raise _pip_failure(done, requirement)
        if not report.exists():
            return None
        installs = json.loads(report.read_text()).get("install") or []
        return str(installs[0]["metadata"]["version"]) if installs else None


def resolve(requirements: Sequence[Requirement], tags: Sequence[str], python: str) -> list[Resolved]:
    """For each requirement the host's version when a wheel exists for the target, else the newest
    that has one (the nearest the index offers), else nothing with the reason. Another version is
    taken only when pip says the index has none of the host's for the target, and the reason says so.

    Raises:
        PlatformError: pip failed for another reason than a missing version.
    """
    resolved = []
    for requirement in requirements:
        version = _available_version(tags, python, requirement.pinned) if requirement.host_version else None
        if version is not None:
            resolved.append(Resolved(requirement, version))
            continue
        version = _available_version(tags, python, requirement.distribution)
        if version is None:
            reason = f"no {requirement.distribution} wheel for {tags[0].split('_', 3)[-1]} / CPython {python}"
            resolved.append(Resolved(requirement, None, reason))
        else:
            reason = f"no {requirement.host_version} wheel for this platform; {version} is the newest that has one"
            resolved.append(Resolved(requirement, version, reason))
    return resolved


def install(target: Path, requirements: Sequence[Requirement], tags: Sequence[str], python: str) -> list[Resolved]:
    """Install the target's wheels into ``target`` (replaced when complete); return what each got.

    One pip run with the host's versions first; only when that fails is each package resolved
    alone (to find the nearest version, or to name the one without a wheel).

    Raises:
        PlatformError: numpy or onnx has no wheel at all for the target, or pip failed.
    """
    plain = [Resolved(r, r.host_version) for r in requirements]
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    with tempfile.TemporaryDirectory(prefix="deploykit-pip-") as scratch:
        constraints = Path(scratch) / "host-versions.txt"
        constraints.write_text("\n".join(host_constraints()) + "\n")
        pinned = ["--target", str(partial), "--constraint", str(constraints)]
        done = _pip(tags, python, [*pinned, *(r.pinned for r in requirements)])
        if done.returncode != 0:
            shutil.rmtree(partial, ignore_errors=True)
            plain = resolve(requirements, tags, python)
            if any(r.requirement.backend is None and r.version is None for r in plain):
                raise missing_wheels_error(plain, tags, python)
            wanted = [f"{r.requirement.distribution}=={r.version}" for r in plain if r.version is not None]
            # the host's versions of the dependencies where the target has them; a runtime that had to
            # move to another version may need other dependencies, which pip then chooses
            done = _pip(tags, python, ["--target", str(partial), *wanted])
            if done.returncode != 0:
                shutil.rmtree(partial, ignore_errors=True)
                raise _pip_failure(done, ", ".join(wanted))
    versions = installed_versions(partial)
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)
    got = []
    for item in plain:
        version = versions.get(_normal(item.requirement.distribution))
        got.append(Resolved(item.requirement, version, item.reason if version else item.reason or "not installed"))
    return got


def missing_wheels_error(resolved: Sequence[Resolved], tags: Sequence[str], python: str) -> PlatformError:
    """The error of a target whose index has no wheel for deploykit's own dependencies: every
    package without a wheel named (deploykit's and the runtimes'), those that have one, and what
    would install the missing ones."""
    arch = tags[0].split("_", 3)[-1]
    missing = [r for r in resolved if r.version is None]
    core = [r.requirement.distribution for r in missing if r.requirement.backend is None]
    runtimes = [r.requirement.distribution for r in missing if r.requirement.backend is not None]
    found = [f"{r.requirement.distribution} {r.version}" for r in resolved if r.version is not None]
    problem = f"the package index has no {arch} wheel for CPython {python} of {', '.join(core)} (deploykit's own "
    problem += "dependencies)" + (f" nor of {', '.join(runtimes)} (runtimes)" if runtimes else "")
    problem += f"; it has {', '.join(found)}" if found else ""
    names = " ".join(r.requirement.pinned for r in missing)
    return PlatformError(
        f"target packages | {problem}; expected wheels tagged {tags[0]} (or older manylinux) for numpy and onnx at "
        "least, since the target's workers import them.",
        hint=f"build {arch} wheels of {names} (pip wheel on a {arch} machine), put them in one folder and run "
        f"PIP_FIND_LINKS=FOLDER deploykit platforms add again: pip takes them from there.",
    )


def _normal(name: str) -> str:
    return name.lower().replace("-", "_").replace(".", "_")


def installed_versions(folder: Path) -> dict[str, str]:
    """Distribution (normalised name) → version of every package pip installed into ``folder``."""
    versions = {}
    for info in folder.glob("*.dist-info"):
        name, _, version = info.name[: -len(".dist-info")].rpartition("-")
        versions[_normal(name)] = version
    return versions
