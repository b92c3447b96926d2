"""Darknet itself as a reference: run Debian's ``libdarknet.so`` on an input and read layer outputs.

A 40-line C program (``darknet_dump.c``, shipped with deploykit) is compiled once against the
installed ``darknet.h`` into a cache directory, so the numbers come from Darknet's own code, not
from a re-implementation. Available where ``libdarknet.so``, ``darknet.h`` and a C compiler are
(Debian/Ubuntu: ``apt-get install darknet gcc``); this is pjreddie's Darknet, so it knows the
YOLOv2/v3 layers but not AlexeyAB's additions (mish, route groups, scale_x_y ...).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from deploykit.errors import ConversionError

HEADER = Path(os.environ.get("DEPLOYKIT_DARKNET_INCLUDE", "/usr/lib/darknet/include")) / "darknet.h"
LIBRARY_DIR = Path(os.environ.get("DEPLOYKIT_DARKNET_LIB", "/usr/lib/darknet"))
SOURCE = Path(__file__).with_name("darknet_dump.c")


def unavailable_reason() -> str | None:
    """None when the Darknet reference can run here; otherwise what is missing."""
    if not HEADER.is_file() or not (LIBRARY_DIR / "libdarknet.so").is_file():
        return f"Darknet's library and header are not installed ({HEADER}); apt-get install darknet"
    if not (shutil.which("gcc") or shutil.which("cc")):
        return "no C compiler to build the Darknet reference helper; apt-get install gcc"
    return None


def helper_binary() -> Path:
    """The compiled helper, built on first use into ~/.cache/deploykit."""
    reason = unavailable_reason()
    if reason:
        raise ConversionError(f"Darknet reference | {reason}.", hint="install Darknet, or verify against OpenCV 4.x.")
    digest = hashlib.sha256(SOURCE.read_bytes() + str(HEADER).encode()).hexdigest()[:16]
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "deploykit"
    binary = cache / f"darknet_dump-{digest}"
    if binary.is_file():
        return binary
    cache.mkdir(parents=True, exist_ok=True)
    compiler = shutil.which("gcc") or shutil.which("cc")
    assert compiler is not None
    temporary = cache / f".{binary.name}.{os.getpid()}"
    completed = subprocess.run(
        [compiler, "-O2", "-o", str(temporary), str(SOURCE), f"-I{HEADER.parent}", f"-L{LIBRARY_DIR}", "-ldarknet",
         f"-Wl,-rpath,{LIBRARY_DIR}", "-lm"],
        capture_output=True, text=True,
    )  # fmt: skip
    if completed.returncode != 0:
        raise ConversionError(
            f"Darknet reference | the helper does not compile against {HEADER}: {completed.stderr.strip()[-300:]}",
            hint="the installed darknet.h may be from another Darknet fork than Debian's.",
        )
    os.replace(temporary, binary)
    return binary


def darknet_outputs(
    cfg: str | os.PathLike[str], weights: str | os.PathLike[str], image: np.ndarray, layers: Sequence[int]
) -> dict[int, np.ndarray]:
    """Darknet's own outputs of ``layers`` (flat float32 arrays) for one CHW or NCHW float image."""
    binary = helper_binary()
    with tempfile.TemporaryDirectory(prefix="deploykit-darknet-") as directory:
        source, target = Path(directory) / "input.bin", Path(directory) / "output.bin"
        np.ascontiguousarray(image, dtype="<f4").tofile(source)
        completed = subprocess.run(
            [str(binary), str(cfg), str(weights), str(source), str(target), *map(str, layers)],
            capture_output=True, text=True,
        )  # fmt: skip
        if completed.returncode != 0:
            raise ConversionError(
                f"Darknet reference | Darknet failed on '{Path(cfg).name}': "
                f"{completed.stderr.strip().splitlines()[-1] if completed.stderr.strip() else completed.returncode}",
                hint="this Darknet may not support every layer of the cfg (pjreddie's knows YOLOv2/v3).",
            )
        data = target.read_bytes()
    outputs, offset = {}, 0
    for index in layers:
        *_, count = np.frombuffer(data, dtype="<i4", count=4, offset=offset)
        offset += 16
        outputs[index] = np.frombuffer(data, dtype="<f4", count=int(count), offset=offset).copy()
        offset += 4 * int(count)
    return outputs
