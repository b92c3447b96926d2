"""A description of the machine a benchmark ran on: CPU, memory, OS, runtimes, GPU, governor.

Reads /proc, /sys and the runtimes' own build info; never guesses: what cannot be read is None.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

_FLAGS_OF_INTEREST = (
    "sse4_2",
    "avx",
    "avx2",
    "fma",
    "avx512f",
    "avx512_vnni",
    "avx512_bf16",
    "avx_vnni",
    "amx_bf16",
    "amx_int8",
    "amx_tile",
    "neon",
    "asimd",
    "asimdhp",
    "bf16",
    "i8mm",
    "sve",
)


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def cpu_info() -> dict[str, Any]:
    model, flags = platform.processor() or None, set()
    text = _read("/proc/cpuinfo") or ""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip().lower()
        if key in ("model name", "hardware", "cpu model") and not model:
            model = value.strip()
        elif key == "model name":
            model = value.strip()
        elif key in ("flags", "features"):
            flags.update(value.split())
    physical = None
    try:
        import psutil

        physical = psutil.cpu_count(logical=False)
    except Exception:
        physical = None
    return {
        "model": model or platform.machine(),
        "architecture": platform.machine(),
        "logical_cores": os.cpu_count(),
        "physical_cores": physical,
        "usable_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "flags": sorted(f for f in flags if f in _FLAGS_OF_INTEREST),
        "governor": _read("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor"),
    }


def memory_bytes() -> int | None:
    text = _read("/proc/meminfo") or ""
    for line in text.splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    return None


def gpu_info() -> list[dict[str, str]]:
    """NVIDIA GPUs as nvidia-smi reports them; empty where there is none."""
    if not shutil.which("nvidia-smi"):
        return []
    try:
        output = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
    except Exception:
        return []
    gpus = []
    for line in output.strip().splitlines():
        name, driver, memory = (part.strip() for part in line.split(",")[:3])
        gpus.append({"name": name, "driver": driver, "memory": memory})
    return gpus


def _installed(names: tuple[str, ...]) -> list[str]:
    from importlib import metadata

    found = []
    for name in names:
        try:
            found.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            continue
    return found


def runtime_info() -> dict[str, Any]:
    """Every runtime's installed distributions (from package metadata, without importing it);
    devices and build details for the runtimes this process has already imported."""
    from deploykit.backends.registry import all_backends

    runtimes: dict[str, Any] = {}
    for backend in all_backends():
        entry: dict[str, Any] = {"distributions": _installed(backend.runtime.packages())}
        runtimes[backend.name] = entry
        if backend.runtime.module not in sys.modules:
            continue
        reason = backend.unavailable_reason()
        if reason:
            entry.update(available=False, reason=reason)
            continue
        entry.update(available=True, version=backend.version(), devices=backend.devices())
        entry.update(backend.runtime.build_info())
        runtimes[backend.name] = entry
    return runtimes


def fingerprint() -> dict[str, Any]:
    """The whole description, as stored in every report."""
    import numpy

    from deploykit._version import __version__

    return {
        "hostname": platform.node(),
        "os": f"{platform.system()} {platform.release()}",
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "numpy": numpy.__version__,
        "deploykit": __version__,
        "cpu": cpu_info(),
        "memory_bytes": memory_bytes(),
        "gpus": gpu_info(),
        "runtimes": runtime_info(),
    }
