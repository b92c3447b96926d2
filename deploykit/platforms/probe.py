"""The self-test a target runs (``platforms add`` and ``list``): what CPU it sees, which Python,
each runtime's version or why it does not import, and what each runtime claims there: its devices,
the precisions it computes natively on each (``Backend.precisions`` run in the target, on the
emulated CPU) and the precision it runs a model stored in f32/f16/bf16/int8 in. Those claims, not
the host's, decide which precisions a candidate on the target is offered. Speaks the workers' job
protocol (``deploykit.workers``): a JSON job on stdin, one result line on stdout.
"""

from __future__ import annotations

import json
import platform
import sys
from typing import Any

from deploykit.platforms.base import STORED_PRECISIONS
from deploykit.workers import send_result


def _cpu_features() -> str:
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.lower().startswith(("features", "isa")):
                    return line.partition(":")[2].strip()
    except OSError:
        pass
    return ""


def probe(backends: list[str]) -> dict[str, Any]:
    import numpy

    from deploykit.backends.registry import get_backend

    versions = {}
    offers = {}
    for name in backends:
        backend = get_backend(name)
        reason = backend.unavailable_reason()
        versions[name] = backend.version() if reason is None else f"unavailable: {reason}"
        if reason is None:
            offers[name] = offer(backend)
    return {
        "status": "ok",
        "machine": platform.machine(),
        "python": platform.python_version(),
        "features": _cpu_features(),
        "numpy": numpy.__version__,
        "backends": versions,
        "offers": offers,
    }


def offer(backend: Any) -> dict[str, Any]:
    """What one runtime claims on this CPU: per device, its native precisions and the precision a
    model stored in each precision runs in (backends without a precision setting)."""
    devices = {}
    for device in backend.devices():
        devices[device] = {
            "precisions": backend.precisions(device),
            "model_precision": {own: backend.model_precision(own, device) for own in STORED_PRECISIONS},
        }
    return {"default_device": backend.default_device, "settable": "precision" in backend.options, "devices": devices}


def main() -> int:
    job = json.loads(sys.stdin.read() or "{}")
    send_result(probe(list(job.get("backends") or [])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
