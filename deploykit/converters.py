"""Converter environments: third-party converters that need their own pins, in venvs deploykit manages.

onnx2tf (ONNX → LiteRT) needs TensorFlow and exact versions of numpy, onnx, protobuf and
onnxruntime that clash with deploykit's own, so it never enters the user's environment. It runs
in a virtual environment under deploykit's cache (``cache_dir()/converters/NAME``), created only
when the user asks (``deploykit converters add NAME``) from the pins shipped with deploykit
(``deploykit/converter_pins/NAME.txt``, every package at an exact version). A conversion that
needs an environment that is missing or was built from other pins is a ``BackendUnavailableError``
whose hint is that command; nothing installs behind the user's back.

An environment is ready when its ``ready.json`` (written last) names the SHA-256 of the pins it was
built from and those are the pins shipped now. This module creates, lists and removes environments
and says how to start their Python; it runs no conversion (the backend that converts does).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from deploykit.cache import cache_dir
from deploykit.errors import BackendUnavailableError, UsageError
from deploykit.io import file_lock

READY_NAME = "ready.json"
PINS_DIRECTORY = Path(__file__).with_name("converter_pins")
INSTALL_TIMEOUT_S = 3600
# Any connection a converter tries at conversion time goes to a closed local port and fails at once:
# conversions are offline (onnx2tf fetches a calibration file unless it finds one; deploykit writes it).
OFFLINE_ENVIRONMENT = {
    "HTTP_PROXY": "http://127.0.0.1:9",
    "HTTPS_PROXY": "http://127.0.0.1:9",
    "http_proxy": "http://127.0.0.1:9",
    "https_proxy": "http://127.0.0.1:9",
    "NO_PROXY": "",
    "no_proxy": "",
}


@dataclass(frozen=True)
class ConverterEnvironment:
    """One managed environment: its name, what it is for, and the packages it pins.

    Attributes:
        name: the name ``deploykit converters add`` takes (``litert``).
        purpose: one line on what runs there.
        requirements: the top-level packages (the pins file fixes every version).
    """

    name: str
    purpose: str
    requirements: tuple[str, ...]

    @property
    def pins(self) -> Path:
        return PINS_DIRECTORY / f"{self.name}.txt"

    @property
    def directory(self) -> Path:
        return cache_dir() / "converters" / self.name

    @property
    def python(self) -> Path:
        return self.directory / "bin" / "python"

    @property
    def bin(self) -> Path:
        return self.directory / "bin"

    def pins_sha256(self) -> str:
        return hashlib.sha256(self.pins.read_bytes()).hexdigest()

    def add_command(self) -> str:
        return f"deploykit converters add {self.name}"

    def record(self) -> dict[str, Any] | None:
        """What ``ready.json`` says (None when the environment is missing or unfinished)."""
        try:
            data: dict[str, Any] = json.loads((self.directory / READY_NAME).read_text())
        except (OSError, ValueError):
            return None
        return data

    def state(self) -> str:
        """``ready``, ``missing``, ``stale`` (built from other pins) or ``broken`` (its Python is gone)."""
        record = self.record()
        if record is None:
            return "missing"
        if not self.python.exists():
            return "broken"
        return "ready" if record.get("pins_sha256") == self.pins_sha256() else "stale"

    def require(self, needed_for: str) -> ConverterEnvironment:
        """This environment when it is ready.

        Raises:
            BackendUnavailableError: it is missing, stale or broken; the hint is the command that builds it.
        """
        state = self.state()
        if state == "ready":
            return self
        problem = {
            "missing": "does not exist",
            "stale": "was built from other pins than this deploykit ships",
            "broken": "is incomplete (its Python is gone)",
        }[state]
        raise BackendUnavailableError(
            f"converter environment '{self.name}' | {needed_for} runs in it, and it {problem} "
            f"({self.directory}); expected a ready environment ({self.purpose}).",
            hint=f"create it once with '{self.add_command()}' (downloads the pinned packages once: "
            "about 2.6 GB, several minutes), then run this again.",
        )

    def worker_environment(self) -> dict[str, str]:
        """Variables for a job run with this environment's Python: its ``bin`` first on PATH (tools that
        call other tools by name find the environment's), no user site or PYTHONPATH, and offline."""
        return {
            **OFFLINE_ENVIRONMENT,
            "PATH": os.pathsep.join([str(self.bin), os.defpath]),
            "VIRTUAL_ENV": str(self.directory),
            "PYTHONNOUSERSITE": "1",
            "PYTHONPATH": "",
        }


ENVIRONMENTS: dict[str, ConverterEnvironment] = {
    "litert": ConverterEnvironment(
        "litert",
        "onnx2tf with TensorFlow, converting ONNX models to LiteRT .tflite files",
        ("onnx2tf", "tensorflow", "tf-keras", "onnxsim", "onnx-graphsurgeon"),
    ),
}


def get_environment(name: str) -> ConverterEnvironment:
    """The environment registered as ``name``.

    Raises:
        UsageError: no environment has that name.
    """
    key = name.strip().lower()
    if key not in ENVIRONMENTS:
        raise UsageError(
            f"converter environment '{name}' | is not one deploykit manages; expected one of "
            f"{', '.join(ENVIRONMENTS)}.",
            hint="'deploykit converters list' shows them.",
        )
    return ENVIRONMENTS[key]


@dataclass(frozen=True)
class EnvironmentStatus:
    """One row of ``deploykit converters list``."""

    name: str
    state: str
    directory: str
    purpose: str
    packages: dict[str, str]
    created: str | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def status(environment: ConverterEnvironment) -> EnvironmentStatus:
    record = environment.record() or {}
    return EnvironmentStatus(
        environment.name,
        environment.state(),
        str(environment.directory),
        environment.purpose,
        dict(record.get("packages") or {}),
        record.get("created"),
    )


def create(environment: ConverterEnvironment, *, python: str | None = None, log: Path | None = None) -> float:
    """Build the environment from its pins (a no-op when it is ready); return the seconds it took.

    The venv is built where it will live (its scripts name their interpreter by absolute path), under a
    lock, and marked ready last: an interrupted build leaves no ``ready.json`` and is rebuilt from scratch.

    Raises:
        BackendUnavailableError: venv or pip failed (pip's last lines in the message, its full output in ``log``).
    """
    started = time.monotonic()
    directory = environment.directory
    with file_lock(directory.parent / f"{environment.name}.lock"):
        if environment.state() == "ready":
            return 0.0
        shutil.rmtree(directory, ignore_errors=True)
        log = log or directory.parent / f"{environment.name}-install.log"
        steps = [
            [python or _base_python(), "-m", "venv", str(directory)],
            [str(environment.python), "-m", "pip", "install", "--no-input", "-r", str(environment.pins)],
        ]
        with open(log, "w") as out:
            for step in steps:
                out.write("$ " + " ".join(step) + "\n")
                out.flush()
                done = subprocess.run(
                    step,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    timeout=INSTALL_TIMEOUT_S,
                    env={**os.environ, "PIP_CONSTRAINT": "", "PYTHONPATH": ""},
                )
                if done.returncode != 0:
                    shutil.rmtree(directory, ignore_errors=True)
                    tail = " / ".join(_tail(log, 3))
                    raise BackendUnavailableError(
                        f"converter environment '{environment.name}' | '{' '.join(step[1:4])}' failed "
                        f"(exit {done.returncode}): {tail}",
                        hint=f"the full output is in {log}; check the network and disk space, then run "
                        f"'{environment.add_command()}' again.",
                    )
        record = {
            "name": environment.name,
            "pins_sha256": environment.pins_sha256(),
            "python": _python_version(environment.python),
            "packages": {
                name: version for name, version in _pinned(environment.pins).items() if name in environment.requirements
            },
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "seconds": round(time.monotonic() - started, 1),
        }
        (directory / READY_NAME).write_text(json.dumps(record, indent=1) + "\n")
    return time.monotonic() - started


def remove(environment: ConverterEnvironment) -> bool:
    """Delete the environment; False when there was none."""
    with file_lock(environment.directory.parent / f"{environment.name}.lock"):
        existed = environment.directory.exists()
        shutil.rmtree(environment.directory, ignore_errors=True)
    return existed


def _base_python() -> str:
    """The interpreter deploykit runs on, outside any venv (a venv made from a venv's Python works too,
    but its ``home`` is then this venv's base anyway)."""
    return str(Path(sys.executable))


def _python_version(python: Path) -> str:
    done = subprocess.run(
        [str(python), "-c", "import sys; print(sys.version.split()[0])"], capture_output=True, text=True, timeout=60
    )
    return done.stdout.strip()


def _pinned(pins: Path) -> dict[str, str]:
    found = {}
    for line in pins.read_text().splitlines():
        name, sep, version = line.split("#")[0].strip().partition("==")
        if sep:
            found[re.sub(r"[-_.]+", "-", name.strip().lower())] = version.strip()
    return found


def _tail(path: Path, count: int) -> list[str]:
    lines = [line.strip() for line in path.read_text(errors="replace").splitlines() if line.strip()]
    return lines[-count:]
