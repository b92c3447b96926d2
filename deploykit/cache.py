"""Where deploykit keeps what it builds once and reuses: one directory rule for every cache.

The Darknet helper (``deploykit.testing.darknet``) and the ncnn backend's pnnx conversions live
under ``cache_dir()``. This module only says where; it creates nothing.
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """deploykit's cache directory.

    Returns:
        ``$DEPLOYKIT_CACHE_DIR`` when set, else ``$XDG_CACHE_HOME/deploykit`` when ``XDG_CACHE_HOME``
        is set, else ``~/.cache/deploykit``. The directory may not exist yet.
    """
    if os.environ.get("DEPLOYKIT_CACHE_DIR"):
        return Path(os.environ["DEPLOYKIT_CACHE_DIR"]).expanduser()
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]).expanduser() / "deploykit"
    return Path.home() / ".cache" / "deploykit"
