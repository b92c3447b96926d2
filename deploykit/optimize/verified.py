"""Which model files were verified already: a file hashed to its recorded SHA-256 is not hashed
again while it is unchanged, so opening a bundle costs a ``stat``, not a hash of the whole model.

The stamp of a file is its device, inode, size, mtime and ctime: any write moves ctime, which a
user cannot set back, so a rewritten file never matches an old stamp. Stamps live in this process
and in ``~/.cache/deploykit/verified-models.json`` (``DEPLOYKIT_CACHE_DIR`` moves it); the cache is
best effort: an unwritable folder only means the next process hashes again.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from deploykit.cache import cache_dir

_VERIFIED_FILE = "verified-models.json"
_VERIFIED_LIMIT = 256
_verified_here: dict[str, tuple[list[int], str]] = {}


def _file_stamp(path: Path) -> list[int]:
    """What any change to a file's bytes changes: device, inode, size, mtime and ctime (ctime cannot
    be set back by a user, so a rewritten file never matches an old stamp)."""
    info = os.stat(path)
    return [info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns]


def _verified_path() -> Path:
    return cache_dir() / _VERIFIED_FILE


def _read_verified() -> dict[str, Any]:
    try:
        data = json.loads(_verified_path().read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def verified_before(path: Path, sha256: str) -> bool:
    """Whether ``path`` was hashed to ``sha256`` before (in this process or, recorded in the user's
    cache folder ``~/.cache/deploykit``, another) and has not changed since. Opening a bundle then
    costs a ``stat`` instead of a hash of the whole model: the ≤ 5 ms of ``docs/optimize.md``."""
    key = os.path.realpath(path)
    try:
        stamp = _file_stamp(path)
    except OSError:
        return False
    for known in (_verified_here.get(key), _read_verified().get(key)):
        if known is not None and list(known[0]) == stamp and known[1] == sha256:
            return True
    return False


def remember_verified(path: Path, sha256: str) -> None:
    """Record that ``path``, as it is now, hashes to ``sha256`` (best effort: an unwritable cache
    folder only means the next process hashes again)."""
    key = os.path.realpath(path)
    try:
        stamp = _file_stamp(path)
    except OSError:
        return
    _verified_here[key] = (stamp, sha256)
    target = _verified_path()
    entries = _read_verified()
    entries.pop(key, None)
    entries[key] = [stamp, sha256]
    kept = dict(list(entries.items())[-_VERIFIED_LIMIT:])
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        temporary = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        temporary.write_text(json.dumps(kept))
        os.replace(temporary, target)
    except OSError:
        return
