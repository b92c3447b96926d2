"""Debian packages extracted into a folder, without installing anything on this system.

``mmdebstrap --variant=extract`` downloads the packages (and what they depend on) for any
architecture and unpacks them: no chroot, no maintainer scripts, no binfmt registration. That is
all an emulated target needs: QEMU runs the target's dynamic loader from the folder (``-L``).
A folder is extracted beside its final place and renamed when complete, so an interrupted run
leaves only a ``.partial`` folder, which the next run removes.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from deploykit.errors import PlatformError

DEBIAN_MIRROR = "http://deb.debian.org/debian"


def manual_steps(target: Path, suite: str, arch: str, packages: Sequence[str]) -> str:
    return (
        f"apt-get install mmdebstrap (Debian/Ubuntu), then run 'deploykit platforms add' again; or build it by hand: "
        f"mmdebstrap --variant=extract --architectures={arch} --include={','.join(packages)} {suite} {target}"
    )


def extract_packages(target: Path, suite: str, arch: str, packages: Sequence[str], *, what: str) -> None:
    """Extract ``packages`` of Debian ``suite`` for ``arch`` into ``target`` (replaced if present).

    Raises:
        PlatformError: mmdebstrap is missing, or it failed (its last lines are in the message).
    """
    tool = shutil.which("mmdebstrap")
    if tool is None:
        raise PlatformError(
            f"{what} | cannot be built here: mmdebstrap is not installed; expected it to extract Debian {suite}'s "
            f"{arch} packages ({', '.join(packages)}).",
            hint=manual_steps(target, suite, arch, packages) + ".",
        )
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.parent.mkdir(parents=True, exist_ok=True)
    command = [
        tool,
        "--quiet",
        "--variant=extract",
        f"--architectures={arch}",
        f"--include={','.join(packages)}",
        suite,
        str(partial),
        DEBIAN_MIRROR,
    ]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=1800)
    except subprocess.TimeoutExpired as exc:
        shutil.rmtree(partial, ignore_errors=True)
        raise PlatformError(
            f"{what} | mmdebstrap did not finish within 30 minutes; expected a few minutes at most.",
            hint="check the network access to deb.debian.org, then run 'deploykit platforms add' again.",
        ) from exc
    if done.returncode != 0:
        shutil.rmtree(partial, ignore_errors=True)
        tail = " | ".join(line.strip() for line in (done.stderr or done.stdout).strip().splitlines()[-3:])
        raise PlatformError(
            f"{what} | mmdebstrap exited with code {done.returncode} ({tail}); expected Debian {suite}'s {arch} "
            f"packages {', '.join(packages)} extracted into {target}.",
            hint="mmdebstrap needs root (or unprivileged user namespaces) and access to deb.debian.org; "
            + manual_steps(target, suite, arch, packages)
            + ".",
        )
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)
