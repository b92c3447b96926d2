"""The v2 system shared-memory extension: tensors that never cross the socket.

A client on the same machine creates a POSIX shared-memory object (``shm_open``; tritonclient's
``tritonclient.utils.shared_memory``), registers a region of it under a name
(``POST /v2/systemsharedmemory/region/NAME/register`` or gRPC ``SystemSharedMemoryRegister``), and
then names the region in an infer request instead of sending the bytes: an input's parameters
``shared_memory_region``, ``shared_memory_byte_size`` and optionally ``shared_memory_offset``; the
same parameters on a requested output make the server write that output there and answer only its
name, datatype and shape. The request body is then a few hundred bytes of JSON whatever the tensors'
size. An input is read in place (a view of the mapping, no copy): the client must not rewrite it
until the answer arrives.

Only for a server bound to loopback (a remote client has no access to this machine's memory), and
only on Linux, where POSIX shared memory is a file under ``/dev/shm``. A key names such a file
(``/name`` or ``name``: one path component, no ``..``); it is opened without following links, must be
a regular file, and a region must lie inside it. This module imports no web framework and no runtime.
"""

from __future__ import annotations

import math
import mmap
import os
import re
import stat
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from deploykit.errors import RequestError

SHM_ROOT = Path("/dev/shm")
_KEY = re.compile(r"^/?[A-Za-z0-9_.@:+-]{1,250}$")
_NAME = re.compile(r"^[^\x00-\x1f\x7f]{1,256}$")
#: the tensor and output parameters that name a region
REGION, BYTE_SIZE, OFFSET = "shared_memory_region", "shared_memory_byte_size", "shared_memory_offset"


@dataclass(frozen=True)
class Region:
    """A registered region: ``byte_size`` bytes from ``offset`` in the shared-memory object ``key``."""

    name: str
    key: str
    offset: int
    byte_size: int
    memory: mmap.mmap
    fd: int  # kept open to check the object's size before every use

    def check_size(self) -> None:
        """Refuse an object that shrank below the region since it was registered: reading a mapping
        past the end of its file would end the server (SIGBUS). A client that shrinks it *while* the
        server reads it can still do that; the server trusts the users of this machine that far."""
        try:
            size = os.fstat(self.fd).st_size
        except OSError:
            size = -1
        if size < self.offset + self.byte_size:
            raise RequestError(
                f"region '{self.name}' | its object '{self.key}' now holds {size} bytes, fewer than the "
                f"{self.offset + self.byte_size} registered.",
                hint="do not truncate a registered object; unregister the region and register it again.",
            )

    def status(self) -> dict[str, Any]:
        return {"name": self.name, "key": self.key, "offset": self.offset, "byte_size": self.byte_size}

    def span(self, what: str, offset: int, byte_size: int) -> tuple[int, int]:
        """Where ``byte_size`` bytes at ``offset`` (within the region) lie in the object, checked."""
        if offset < 0 or byte_size < 0 or offset + byte_size > self.byte_size:
            raise RequestError(
                f"{what} | asks for {byte_size} bytes at offset {offset} of shared-memory region '{self.name}', "
                f"which holds {self.byte_size} bytes.",
                hint="register a larger region, or fix shared_memory_byte_size / shared_memory_offset.",
            )
        return self.offset + offset, self.offset + offset + byte_size


class SharedMemoryRegions:
    """The regions clients have registered, by name; safe to use from several threads.

    ``enabled`` is False for a server other machines reach (``--allow-remote``) and off Linux: every
    call then says so with the protocol's error.
    """

    def __init__(self, enabled: bool, why_not: str = "") -> None:
        self.enabled = enabled and SHM_ROOT.is_dir()
        self.why_not = why_not or ("" if self.enabled else f"this machine has no {SHM_ROOT}")
        self._regions: dict[str, Region] = {}
        self._lock = threading.Lock()

    def _check_enabled(self) -> None:
        if not self.enabled:
            raise RequestError(
                f"system shared memory | is not offered by this server: {self.why_not}.",
                hint="send the tensors in the request (binary data), or serve on loopback on Linux.",
            )

    def register(self, name: Any, key: Any, offset: Any, byte_size: Any) -> None:
        """Map ``byte_size`` bytes from ``offset`` of the object ``key`` under ``name``.

        Raises:
            RequestError: shared memory is off here, the name is taken, the key names no usable
                shared-memory object, or the region does not lie inside it.
        """
        self._check_enabled()
        if not isinstance(name, str) or not _NAME.match(name):
            raise RequestError(f"region name {name!r:.80} | is not a name.", hint="name the region, e.g. input0.")
        if not isinstance(key, str) or not _KEY.match(key) or key.strip("/") in (".", ".."):
            raise RequestError(
                f"region '{name}' | key {key!r:.80} is not a shared-memory key.",
                hint="pass the key given to shm_open, e.g. /input0 (one name, no other '/').",
            )
        _check_sizes(
            f"region '{name}'",
            {"offset": offset, "byte_size": byte_size},
            "pass the region's offset and byte_size in bytes.",
        )
        if byte_size == 0:
            raise RequestError(f"region '{name}' | byte_size is 0.", hint="register at least one byte.")
        with self._lock:
            if name in self._regions:
                raise RequestError(
                    f"region '{name}' | is already registered (key {self._regions[name].key}).",
                    hint="unregister it first, or pick another name.",
                )
            self._regions[name] = Region(name, key, offset, byte_size, *_map(name, key, offset, byte_size))

    def unregister(self, name: str | None = None) -> None:
        """Forget one region (``name``) or all. A request still reading a region keeps its mapping alive."""
        self._check_enabled()
        with self._lock:
            if name:
                if name not in self._regions:
                    raise self._unknown(name)
                gone = [self._regions.pop(name)]  # the mapping closes once no array views it any more
            else:
                gone = list(self._regions.values())
                self._regions.clear()
        for region in gone:
            os.close(region.fd)

    def status(self, name: str | None = None) -> list[dict[str, Any]]:
        self._check_enabled()
        with self._lock:
            if name:
                if name not in self._regions:
                    raise self._unknown(name)
                return [self._regions[name].status()]
            return [region.status() for region in self._regions.values()]

    def _unknown(self, name: str) -> RequestError:
        known = ", ".join(repr(n) for n in self._regions) or "none"
        return RequestError(
            f"region '{name:.128}' | is not a registered shared-memory region; registered: {known:.200}.",
            hint="register it first (POST /v2/systemsharedmemory/region/NAME/register).",
        )

    def region(self, name: Any) -> Region:
        self._check_enabled()
        with self._lock:
            if not isinstance(name, str) or name not in self._regions:
                raise self._unknown(str(name))
            return self._regions[name]

    def read(self, what: str, name: Any, offset: Any, byte_size: Any) -> memoryview:
        """The bytes an input names (a view of the mapping)."""
        region = self.region(name)
        offset, byte_size = _check_ints(what, offset, byte_size)
        start, end = region.span(what, offset, byte_size)
        region.check_size()
        return memoryview(region.memory)[start:end]

    def write(self, what: str, name: Any, offset: Any, byte_size: Any, array: np.ndarray) -> None:
        """Write an output where the request asked for it; refused if it does not fit."""
        region = self.region(name)
        offset, byte_size = _check_ints(what, offset, byte_size)
        if array.dtype.kind == "O":
            raise RequestError(
                f"{what} | holds strings; shared memory carries numeric tensors.",
                hint="ask for it in the response instead.",
            )
        if array.nbytes > byte_size:
            raise RequestError(
                f"{what} | needs {array.nbytes} bytes ({math.prod(array.shape)} {array.dtype.name} for shape "
                f"{list(array.shape)}), shared_memory_byte_size is {byte_size}.",
                hint="register and name a region of at least that many bytes.",
            )
        start, _ = region.span(what, offset, array.nbytes)
        region.check_size()
        target = np.frombuffer(region.memory, dtype=np.uint8, count=array.nbytes, offset=start)
        target[:] = np.ascontiguousarray(array).reshape(-1).view(np.uint8)


def _check_ints(what: str, offset: Any, byte_size: Any) -> tuple[int, int]:
    """A tensor's ``shared_memory_offset`` (default 0) and ``shared_memory_byte_size``, checked."""
    offset = 0 if offset is None else offset
    _check_sizes(
        what,
        {OFFSET: offset, BYTE_SIZE: byte_size},
        f"pass {BYTE_SIZE} (and {OFFSET}, default 0) in bytes with {REGION}.",
    )
    return offset, byte_size


def _check_sizes(what: str, fields: dict[str, Any], hint: str) -> None:
    """Every field's value a non-negative integer (not a bool), or a ``RequestError`` naming it."""
    for field, value in fields.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise RequestError(f"{what} | {field} {value!r:.40} is not a non-negative integer.", hint=hint)


def _map(name: str, key: str, offset: int, byte_size: int) -> tuple[mmap.mmap, int]:
    path = SHM_ROOT / key.lstrip("/")
    try:
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise RequestError(
            f"region '{name}' | key '{key}' opens no shared-memory object ({path}: {exc.strerror}).",
            hint="create it first (shm_open; tritonclient.utils.shared_memory.create_shared_memory_region).",
        ) from exc
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise RequestError(
                f"region '{name}' | key '{key}' is not a shared-memory object ({path}).",
                hint="pass the key of an object made by shm_open.",
            )
        if offset + byte_size > info.st_size:
            raise RequestError(
                f"region '{name}' | offset {offset} + byte_size {byte_size} runs past the end of '{key}' "
                f"({info.st_size} bytes).",
                hint="register a region inside the object, or make the object larger.",
            )
        return mmap.mmap(fd, info.st_size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE), fd
    except BaseException:
        os.close(fd)
        raise
