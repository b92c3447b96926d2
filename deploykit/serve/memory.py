"""Keeping large freed buffers for the next request instead of handing them back to the kernel.

Every request moves megabytes (YOLOv4-tiny: a 2 MB body in, 860 KB out), through several buffers of
that size. glibc's malloc serves such sizes with ``mmap`` (or trims them off the heap top once freed),
so each request's buffers are fresh pages: about 500 page faults per 2 MB, each a kernel entry and a
zeroed page. Measured on the server (``benchmarks/serve.py``), that was most of its CPU per call. A
server process can afford to keep those buffers: ``reuse_large_buffers`` raises glibc's mmap and trim
thresholds (``mallopt``), so freed buffers stay in the heap and the next request reuses warm pages.
The cost is memory held after a peak, up to the trim threshold. Elsewhere (musl, macOS) nothing changes.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import platform

log = logging.getLogger("deploykit.serve")

# mallopt's parameters (malloc.h): the thresholds in bytes
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
#: glibc's largest mmap threshold on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX): buffers up to it come from the heap
MMAP_THRESHOLD = 32 * 1024 * 1024
#: free memory at the top of a heap is handed back only beyond this
TRIM_THRESHOLD = 256 * 1024 * 1024


def reuse_large_buffers() -> str:
    """Ask glibc to keep freed buffers up to 32 MiB for reuse; what was done, in words (for the log).

    Process-wide, so the server calls it only where it owns the process (``deploykit serve``, or
    ``ServerSettings(reuse_large_buffers=True)`` in an app that chooses it).
    """
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return f"large buffers: unchanged ({platform.system()} {platform.libc_ver()[0] or 'libc'} is not glibc)"
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError) as exc:
        return f"large buffers: unchanged (mallopt unavailable: {exc})"
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    done = mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1 and mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
    if not done:
        return "large buffers: unchanged (glibc refused mallopt)"
    return (
        f"large buffers: reused (glibc mmap threshold {MMAP_THRESHOLD >> 20} MiB, "
        f"trim threshold {TRIM_THRESHOLD >> 20} MiB)"
    )
