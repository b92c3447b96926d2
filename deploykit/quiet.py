"""Nothing deploykit loads calls home: the telemetry of the libraries it imports is off in its processes.

OpenVINO's model converter and NNCF send usage events through the ``openvino_telemetry`` package, and
both fall back to a silent stub of their own when that package cannot be imported. deploykit makes it
unimportable in its processes (an entry of ``None`` in ``sys.modules``, Python's own way to say "not
installed") before either library is imported, so no consent file is read or written and no request
is made, and the user's settings (the consent file in their home) stay as they are. Ray's usage
statistics are off through its variable, and so is ONNX Runtime's own telemetry (a C++ client in its
library that writes a session file into the temporary directory, queues events in a store under
``~/.cache/Microsoft`` and posts them to Microsoft's collector): ``ORT_DISABLE_TELEMETRY``. A process
that imported ``openvino_telemetry`` before deploykit keeps it, and a variable the user set stays as
set: that was the user's choice, not ours.

This module must not import any third-party library.
"""

from __future__ import annotations

import os
import sys

#: Modules whose only purpose is to send usage data; deploykit's processes run without them.
TELEMETRY_MODULES = ("openvino_telemetry",)

#: Variables that switch a library's usage reporting off, set unless the user set them.
TELEMETRY_VARIABLES = {"RAY_USAGE_STATS_ENABLED": "0", "ORT_DISABLE_TELEMETRY": "1"}


def silence_telemetry() -> None:
    """Turn the known phone-home paths off for this process and the processes it starts."""
    for name in TELEMETRY_MODULES:
        if name not in sys.modules:
            sys.modules[name] = None  # type: ignore[assignment]
    for name, value in TELEMETRY_VARIABLES.items():
        os.environ.setdefault(name, value)
