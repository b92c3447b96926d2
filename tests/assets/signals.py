"""Children that a test will signal start with the dispositions a shell gives a foreground command.

A test run from a background job (``make test &``, ``nohup``) inherits SIGINT ignored, and a child keeps an
ignored disposition through ``exec``: deploykit then rightly leaves Ctrl-C ignored and the command runs on
to exit 0, which reads as a lost signal. Pass ``preexec_fn=default_signals`` to ``subprocess.Popen``.
"""

from __future__ import annotations

import signal

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def default_signals() -> None:
    """In the child, before ``exec``: SIGINT, SIGTERM and SIGHUP back to their default disposition."""
    for signum in SIGNALS:
        signal.signal(signum, signal.SIG_DFL)
