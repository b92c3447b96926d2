"""Bounds on an oracle's worker: how much memory it may take, and what it says when it runs out.

An oracle (onnx's reference evaluator above all) is plain numpy: on a large graph it can ask for
tens of GiB (a dilated convolution's im2col, a detector's anchors) and, unbounded, the kernel's
OOM killer ends it, or another process on a shared machine. The oracle's worker therefore runs
under an address-space limit (``RLIMIT_AS``, set in the worker before the model is read), so an
allocation past it fails at once with ``MemoryError`` and nothing is touched; the worker reports
"oracle onnx-reference | ran out of its 4 GiB memory limit on node 'Conv_3' (Conv)" and the rows
are ``unverified`` with that reason. The limit is the user's (``--oracle-memory 16GiB``) or three
quarters of the memory available when the check starts (at least ``MIN_DEFAULT_BYTES``).

Sizes are written as in the rest of deploykit: a number and a unit of 1024s (``512MiB``, ``4GiB``,
``4G``, ``4GB``), or a bare number of bytes. This module sets limits and words errors; it runs nothing.
"""

from __future__ import annotations

import re

from deploykit.errors import BackendError, UsageError

MIN_DEFAULT_BYTES = 2 * 1024**3
"""The default limit is never below this, so a busy machine does not refuse a small model's oracle."""
DEFAULT_SHARE_OF_AVAILABLE = 0.75

_UNITS = {"": 1, "B": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}


def parse_size(text: str, option: str = "--oracle-memory") -> int:
    """``4GiB``, ``512MiB``, ``4G``, ``4GB`` or a bare number of bytes → bytes (powers of 1024).

    Raises:
        UsageError: the text is not a size, or it is zero.
    """
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([kmgt]?)(i?b)?\s*", str(text), flags=re.IGNORECASE)
    if not match or (match.group(3) and match.group(3).lower() == "ib" and not match.group(2)):
        raise UsageError(f"{option} '{text}' | is not a size.", hint=f"write e.g. {option} 4GiB or {option} 512MiB.")
    size = int(float(match.group(1)) * _UNITS[match.group(2).upper()])
    if size <= 0:
        raise UsageError(f"{option} '{text}' | must be more than 0 bytes.", hint=f"e.g. {option} 4GiB.")
    return size


def format_size(size_bytes: float) -> str:
    """``4 GiB``, ``512 MiB``, ``1.5 GiB``: what a limit is called in messages."""
    value = float(size_bytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.3g} {unit}"
        value /= 1024
    return f"{value:.3g} TiB"


def available_bytes() -> int | None:
    """The memory the kernel says can be had without swapping (``MemAvailable``), or None off Linux."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def default_memory_bytes() -> int | None:
    """Three quarters of the available memory, at least ``MIN_DEFAULT_BYTES``; None where it is unknown."""
    available = available_bytes()
    if available is None:
        return None
    return max(MIN_DEFAULT_BYTES, int(available * DEFAULT_SHARE_OF_AVAILABLE))


def apply_memory_limit(limit_bytes: int) -> None:
    """Limit this process's address space to ``limit_bytes`` (never above a hard limit already set).
    Called in a worker before it reads anything; a system without ``resource`` keeps no limit."""
    try:
        import resource
    except ImportError:
        return
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = limit_bytes if hard == resource.RLIM_INFINITY else min(limit_bytes, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


def out_of_memory(subject: str, limit_bytes: int | None, exc: MemoryError) -> BackendError:
    """The error of a worker whose allocation failed: under its limit, naming the node when the
    runtime said which (a ``MemoryError`` with a ``node`` attribute, as the reference backend raises)."""
    node = getattr(exc, "node", None)
    where = f" on node {node}" if node else ""
    if limit_bytes is None:
        return BackendError(
            f"{subject} | ran out of memory{where}.",
            hint="free memory, or choose another oracle with --oracle.",
        )
    return BackendError(
        f"{subject} | ran out of its {format_size(limit_bytes)} memory limit{where}.",
        hint="raise it with --oracle-memory (e.g. --oracle-memory 32GiB) where the machine has that much free, "
        "or choose another oracle with --oracle.",
    )
