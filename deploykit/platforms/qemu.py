"""User-mode QEMU: find one new enough to run the runtimes' builds, or fetch Debian's into the cache.

Version 8 is the floor: Debian bookworm's qemu-user 7.2 segfaults while onnxruntime's aarch64
build is imported; trixie's 10.0 runs it. A QEMU named explicitly (``DEPLOYKIT_QEMU_<ARCH>``)
that is too old is refused with that reason; one found on the PATH that is too old is passed
over for the cache's (and named in the error when there is none).
"""

from __future__ import annotations

import os
import platform as host_platform
import re
import shutil
import subprocess
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from deploykit.errors import PlatformError

MIN_MAJOR = 8
# Debian's release whose qemu-user is new enough (10.0); its binaries are static.
QEMU_SUITE = "trixie"
_VERSION = re.compile(r"version (\d+)\.(\d+)(?:\.(\d+))?")
_OLD_REASON = (
    "user-mode QEMU before 8 crashes inside the runtimes' aarch64 builds (bookworm's 7.2 segfaults importing "
    "onnxruntime)"
)


@dataclass(frozen=True)
class Qemu:
    """A user-mode QEMU binary and its version."""

    path: Path
    version: tuple[int, int, int]

    @property
    def version_text(self) -> str:
        return ".".join(str(part) for part in self.version)

    def describe(self) -> str:
        return f"{self.path.name} {self.version_text}"


def qemu_version(path: str | os.PathLike[str]) -> tuple[int, int, int] | None:
    """``(10, 0, 13)`` from ``qemu-aarch64 --version``; None when it does not run or say one."""
    try:
        done = subprocess.run([os.fspath(path), "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    match = _VERSION.search(done.stdout)
    if done.returncode != 0 or not match:
        return None
    return int(match[1]), int(match[2]), int(match[3] or 0)


def cached_qemu_dir(cache: Path) -> Path:
    """Where ``fetch_qemu`` extracts Debian's qemu-user (``<cache>/platforms/qemu``)."""
    return cache / "platforms" / "qemu"


def environment_variable(arch: str) -> str:
    return f"DEPLOYKIT_QEMU_{arch.upper()}"


def find_qemu(arch: str, cache: Path) -> Qemu:
    """The QEMU that runs ``arch`` binaries: ``$DEPLOYKIT_QEMU_<ARCH>`` if set (refused when older
    than 8), else the cache's, else ``qemu-<arch>-static`` / ``qemu-<arch>`` on the PATH.

    Raises:
        PlatformError: none found, or only ones older than 8 (named, with what would install one).
    """
    variable = environment_variable(arch)
    explicit = os.environ.get(variable)
    if explicit:
        version = qemu_version(explicit)
        if version is None:
            raise PlatformError(
                f"{variable}={explicit} | does not run or does not print a version; expected a user-mode "
                f"qemu-{arch} binary.",
                hint=f"unset {variable} to use the cache's, or point it at qemu-{arch} 8 or newer.",
            )
        if version[0] < MIN_MAJOR:
            raise PlatformError(
                f"{variable}={explicit} | is QEMU {'.'.join(map(str, version))}, expected {MIN_MAJOR} or newer: "
                f"{_OLD_REASON}.",
                hint=f"unset {variable}; 'deploykit platforms add' extracts Debian {QEMU_SUITE}'s qemu-user into the "
                "cache.",
            )
        return Qemu(Path(explicit), version)
    candidates = [cached_qemu_dir(cache) / "usr" / "bin" / f"qemu-{arch}"]
    candidates += [Path(found) for name in (f"qemu-{arch}-static", f"qemu-{arch}") if (found := shutil.which(name))]
    too_old = []
    for path in candidates:
        if not path.exists():
            continue
        version = qemu_version(path)
        if version is None:
            continue
        if version[0] >= MIN_MAJOR:
            return Qemu(path, version)
        too_old.append(f"{path} is {'.'.join(map(str, version))}")
    found = f"found only {', '.join(too_old)}; {_OLD_REASON}" if too_old else f"no qemu-{arch} found"
    raise PlatformError(
        f"user-mode QEMU for {arch} | {found}; expected qemu-{arch} {MIN_MAJOR} or newer.",
        hint=f"'deploykit platforms add' extracts Debian {QEMU_SUITE}'s qemu-user into the cache (needs mmdebstrap: "
        f"apt-get install mmdebstrap), or install qemu-user >= {MIN_MAJOR} and put qemu-{arch} on the PATH, or set "
        f"{variable}.",
    )


def host_debian_arch() -> str:
    machine = host_platform.machine().lower()
    return {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(machine, machine)


def fetch_qemu(cache: Path, archs: Collection[str]) -> Path:
    """Extract Debian trixie's qemu-user (static binaries) into the cache with mmdebstrap and keep
    the emulators of ``archs`` (the package holds ~30 of them, 450 MB); return the folder.
    Nothing is left half-written: it is extracted beside and renamed when complete."""
    from deploykit.platforms.debian import extract_packages

    target = cached_qemu_dir(cache)
    extract_packages(target, QEMU_SUITE, host_debian_arch(), ["qemu-user"], what="Debian's qemu-user")
    for binary in (target / "usr" / "bin").glob("qemu-*"):
        if binary.name.removeprefix("qemu-") not in archs:
            binary.unlink()
    return target
