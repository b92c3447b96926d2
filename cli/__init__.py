"""The ``deploykit`` command-line app (installed as ``deploykit.cli``)."""

from __future__ import annotations

import os
import sys


def _reopen_closed_standard_streams() -> None:
    """``deploykit ... >&-`` starts with file descriptor 1 (or 2) closed and ``sys.stdout`` None: what the
    command writes (files) must still be written, so what it would print goes to /dev/null instead, and a
    closed stdout is said on stderr."""
    for fd, name in ((1, "stdout"), (2, "stderr")):
        if getattr(sys, name) is not None:
            continue
        opened = os.open(os.devnull, os.O_WRONLY)
        if opened != fd:
            os.dup2(opened, fd)
            os.close(opened)
        setattr(sys, name, open(fd, "w", closefd=False))
        if name == "stdout" and sys.stderr is not None:
            sys.stderr.write("warning: standard output is closed; what deploykit prints there is dropped.\n")


_reopen_closed_standard_streams()
