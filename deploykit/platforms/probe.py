"""The self-test a target runs (``platforms add`` and ``list``): what CPU it sees, which Python,
and each runtime's version or why it does not import. Speaks the workers' job protocol
(``deploykit.verify.isolated``): a JSON job on stdin, one result line on stdout.
"""

from __future__ import annotations

import json
import platform
import sys
from typing import Any

from deploykit.verify.isolated import RESULT_PREFIX


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
    for name in backends:
        backend = get_backend(name)
        reason = backend.unavailable_reason()
        versions[name] = backend.version() if reason is None else f"unavailable: {reason}"
    return {
        "status": "ok",
        "machine": platform.machine(),
        "python": platform.python_version(),
        "features": _cpu_features(),
        "numpy": numpy.__version__,
        "backends": versions,
    }


def main() -> int:
    job = json.loads(sys.stdin.read() or "{}")
    print(RESULT_PREFIX + json.dumps(probe(list(job.get("backends") or []))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
