"""What this installation is: deploykit, Python, the platform and the CPU features that matter to
inference, every runtime (installed or not, and why not), the tools beside them and the converter
environments deploykit manages. ``deploykit version`` prints it; a bug report pastes it.

Cheap by design: runtimes are imported to ask their version and build, but no model is loaded, no
device is opened and no process is started. A tool that is not a runtime is read from its package
metadata only.
"""

from __future__ import annotations

import importlib
import os
import platform
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

CPU_FEATURES: dict[str, tuple[str, ...]] = {
    # what ONNX Runtime, OpenVINO and ncnn dispatch on: int8 dot products (VNNI, i8mm), bf16
    # arithmetic (avx512_bf16, AMX, ARM bf16) and wide vectors (AVX2, AVX-512, SVE)
    "x86_64": ("avx2", "fma", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_tile", "amx_int8", "amx_bf16"),
    "aarch64": ("asimd", "asimdhp", "asimddp", "i8mm", "bf16", "sve", "sve2"),
}
"""The CPU flags worth a line, per architecture (``/proc/cpuinfo`` spelling); others are not listed."""
_ARCH_ALIASES = {"amd64": "x86_64", "x64": "x86_64", "arm64": "aarch64"}

TOOLS: tuple[tuple[str, str, str], ...] = (
    # (distribution, pip extra, what deploykit uses it for)
    ("numpy", "", "arrays"),
    ("onnx", "", "the model format and the reference evaluator"),
    ("torch", "torch", "convert torch"),
    ("onnxscript", "torch", "convert torch (the dynamo exporter)"),
    ("onnxslim", "torch", "convert torch --simplify"),
    ("nncf", "quantize", "quantize --quantizer nncf"),
    ("ray", "ray", "--engine ray, fleet"),
    ("starlette", "serve", "serve (HTTP)"),
    ("grpcio", "serve", "serve (gRPC)"),
)
"""Packages deploykit uses beside the runtimes, read from their metadata (never imported here)."""


@dataclass(frozen=True)
class RuntimeVersion:
    """One backend's runtime: installed distributions, the version it reports, its build, or why it is unusable."""

    backend: str
    distributions: dict[str, str]
    available: bool
    version: str | None = None
    build: dict[str, Any] = field(default_factory=dict)
    reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "distributions": dict(self.distributions),
            "available": self.available,
            "version": self.version,
            "build": dict(self.build),
            "reason": self.reason,
        }


@dataclass(frozen=True)
class ToolVersion:
    """A package deploykit uses beside the runtimes: its version, or None with the extra that installs it."""

    name: str
    version: str | None
    used_for: str
    pip_extra: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version, "used_for": self.used_for, "pip_extra": self.pip_extra}


@dataclass(frozen=True)
class ManagedEnvironment:
    """A converter environment deploykit created and manages apart from the user's (its own pins):
    its name, where it lives and the versions of what it holds."""

    name: str
    path: str
    versions: dict[str, str]

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "path": self.path, "versions": dict(self.versions)}


ENVIRONMENT_PROVIDERS: tuple[str, ...] = ("deploykit.about:converter_environments",)
"""``module:function`` of each kind of managed converter environment; the function takes no
arguments and returns a list of ``ManagedEnvironment`` (the ones that exist on this machine, none
when nothing was created yet). A converter that installs its own environment adds one line here;
its module is imported only when the report is made."""


def converter_environments() -> list[ManagedEnvironment]:
    """The environments of ``deploykit converters`` that are ready here (``litert``: onnx2tf), with the
    versions their ``ready.json`` recorded; missing, stale or broken ones are ``converters list``'s to show."""
    from deploykit.converters import ENVIRONMENTS

    return [
        ManagedEnvironment(name, str(environment.directory), dict((environment.record() or {}).get("packages") or {}))
        for name, environment in ENVIRONMENTS.items()
        if environment.state() == "ready"
    ]


@dataclass(frozen=True)
class AboutReport:
    """Everything ``deploykit version`` says, as one value."""

    deploykit: str
    python: str
    python_implementation: str
    executable: str
    platform: str
    architecture: str
    cpu_model: str | None
    cpu_features: dict[str, bool]
    runtimes: tuple[RuntimeVersion, ...]
    tools: tuple[ToolVersion, ...]
    environments: tuple[ManagedEnvironment, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "deploykit": self.deploykit,
            "python": self.python,
            "python_implementation": self.python_implementation,
            "executable": self.executable,
            "platform": self.platform,
            "architecture": self.architecture,
            "cpu_model": self.cpu_model,
            "cpu_features": dict(self.cpu_features),
            "runtimes": [runtime.to_dict() for runtime in self.runtimes],
            "tools": [tool.to_dict() for tool in self.tools],
            "environments": [environment.to_dict() for environment in self.environments],
        }


def architecture() -> str:
    """The machine's architecture in ``/proc/cpuinfo``'s family names (``x86_64``, ``aarch64``)."""
    machine = platform.machine().lower()
    return _ARCH_ALIASES.get(machine, machine)


def cpu_features(cpuinfo: str | None = None, arch: str | None = None) -> tuple[str | None, dict[str, bool]]:
    """The CPU's model name and, for each flag of ``CPU_FEATURES`` of its architecture, whether it
    has it (read from ``cpuinfo``, by default ``/proc/cpuinfo``; no flags where it cannot be read)."""
    if cpuinfo is None:
        try:
            with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
                cpuinfo = handle.read()
        except OSError:
            cpuinfo = ""
    model, flags = None, set()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        key = key.strip().lower()
        if key in ("model name", "hardware", "cpu model") and model is None:
            model = value.strip() or None
        elif key in ("flags", "features"):
            flags.update(value.split())
    wanted = CPU_FEATURES.get(arch or architecture(), ())
    return model, {name: name in flags for name in wanted} if flags else {}


def _distributions(names: tuple[str, ...]) -> dict[str, str]:
    found = {}
    for name in names:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found


def runtime_versions() -> tuple[RuntimeVersion, ...]:
    """Every registered backend's runtime; one that is missing or broken is a row with its reason."""
    from deploykit.backends.registry import backend_names, get_backend
    from deploykit.errors import DeployKitError

    rows = []
    for name in backend_names():
        try:
            backend = get_backend(name)
        except DeployKitError as exc:  # a plug-in that cannot load is one row, never the whole report
            rows.append(RuntimeVersion(name, {}, False, reason=str(exc)))
            continue
        distributions = _distributions(backend.runtime.packages())
        reason = backend.unavailable_reason()
        if reason is not None:
            rows.append(RuntimeVersion(backend.name, distributions, False, reason=reason))
            continue
        try:
            rows.append(
                RuntimeVersion(backend.name, distributions, True, backend.version(), backend.runtime.build_info())
            )
        except Exception as exc:  # a runtime that imports but cannot say its version or build
            rows.append(RuntimeVersion(backend.name, distributions, False, reason=f"{type(exc).__name__}: {exc}"))
    return tuple(rows)


def tool_versions() -> tuple[ToolVersion, ...]:
    found = _distributions(tuple(name for name, _, _ in TOOLS))
    return tuple(ToolVersion(name, found.get(name), used_for, extra) for name, extra, used_for in TOOLS)


def managed_environments(providers: tuple[str, ...] | None = None) -> tuple[ManagedEnvironment, ...]:
    """The managed converter environments every provider in ``providers`` (default
    ``ENVIRONMENT_PROVIDERS``) finds on this machine, in the providers' order."""
    found: list[ManagedEnvironment] = []
    for target in ENVIRONMENT_PROVIDERS if providers is None else providers:
        module, _, function = target.partition(":")
        provider: Callable[[], list[ManagedEnvironment]] = getattr(importlib.import_module(module), function)
        found.extend(provider())
    return tuple(found)


def _platform() -> str:
    """The kernel and C library, e.g. ``Linux 6.1.0 glibc 2.36`` (not ``platform.platform()``, which
    starts ``uname -p`` in a process)."""
    system = os.uname() if hasattr(os, "uname") else None
    text = f"{system.sysname} {system.release}" if system else f"{platform.system()} {platform.release()}"
    libc, libc_version = platform.libc_ver()
    return f"{text} {libc} {libc_version}" if libc else text


def about() -> AboutReport:
    """This installation, as ``deploykit version`` prints it (no model is loaded)."""
    from deploykit._version import __version__

    arch = architecture()
    model, features = cpu_features(arch=arch)
    return AboutReport(
        deploykit=__version__,
        python=platform.python_version(),
        python_implementation=platform.python_implementation(),
        executable=sys.executable,
        platform=_platform(),
        architecture=arch,
        cpu_model=model,
        cpu_features=features,
        runtimes=runtime_versions(),
        tools=tool_versions(),
        environments=managed_environments(),
    )
