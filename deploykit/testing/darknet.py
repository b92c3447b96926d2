"""Darknet itself as an oracle: run Debian's ``libdarknet.so`` on an input and read layer outputs.

Use it to check a Darknet conversion of your own against the numbers Darknet's own code computes::

    from deploykit.testing import darknet

    if darknet.unavailable_reason() is None:
        expected = darknet.darknet_outputs("yolov3-tiny.cfg", "yolov3-tiny.weights", image, [16, 23])

A small C program (``darknet_dump.c``, shipped with deploykit) is compiled against the installed
``darknet.h`` and linked to ``libdarknet.so``. Nothing is compiled when deploykit is imported or when
a conversion runs with the default oracle choice: only ``build_helper()``, ``darknet_outputs()`` and
``convert_darknet(..., oracle="darknet")`` (``deploykit convert darknet --oracle darknet``) build it.

Where things are looked for:

- the helper is built into ``cache_dir()``: ``$DEPLOYKIT_CACHE_DIR`` when set, else
  ``$XDG_CACHE_HOME/deploykit`` when ``XDG_CACHE_HOME`` is set, else ``~/.cache/deploykit``. Its name
  carries a digest of the C source and of ``darknet.h``, so a new Darknet or deploykit builds a new one;
- ``darknet.h`` in ``$DEPLOYKIT_DARKNET_INCLUDE`` (default ``/usr/lib/darknet/include``) and
  ``libdarknet.so`` in ``$DEPLOYKIT_DARKNET_LIB`` (default ``/usr/lib/darknet``): Debian's ``darknet``;
- the C compiler: ``$CC`` when set (split like Make does, so ``CC='ccache gcc'`` works), else ``gcc``
  or ``cc`` on ``PATH``.

This is pjreddie's Darknet, so it knows the YOLOv2/v3 layers but not AlexeyAB's additions (mish,
route groups, scale_x_y ...): for those cfgs it computes something else, and OpenCV 4.x's
``readNetFromDarknet`` is the oracle to use. ``darknet_outputs`` refuses such a cfg
(``unsupported_reason``), and checks in Python what Darknet itself would accept silently: the image's
shape against the cfg's ``[net]``, the weights' size against the cfg, and the layer indices.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from deploykit.cache import cache_dir
from deploykit.errors import DeployKitError, OracleError
from deploykit.io import scratch_dir
from deploykit.workers import describe_exit

if TYPE_CHECKING:
    from deploykit.convert.darknet.layers import Network

SOURCE_NAME = "darknet_dump.c"
_SUBJECT = "Darknet helper"
_ALTERNATIVE = "or verify against OpenCV 4.x's importer instead (pip install 'opencv-python-headless<5')."


def header_path() -> Path:
    """The ``darknet.h`` the helper compiles against (``$DEPLOYKIT_DARKNET_INCLUDE``/darknet.h)."""
    return Path(os.environ.get("DEPLOYKIT_DARKNET_INCLUDE") or "/usr/lib/darknet/include") / "darknet.h"


def library_dir() -> Path:
    """The directory of the ``libdarknet.so`` the helper links to (``$DEPLOYKIT_DARKNET_LIB``)."""
    return Path(os.environ.get("DEPLOYKIT_DARKNET_LIB") or "/usr/lib/darknet")


def _compiler() -> list[str] | None:
    """The compiler's command line: ``$CC`` split into words as Make does (``ccache gcc``, ``gcc -O2``)."""
    if os.environ.get("CC", "").strip():
        try:
            program, *arguments = shlex.split(os.environ["CC"])
        except ValueError:  # an unbalanced quote
            return None
        found = shutil.which(program)
        return [found, *arguments] if found else None
    found = shutil.which("gcc") or shutil.which("cc")
    return [found] if found else None


def _darknet_missing() -> str | None:
    header, library = header_path(), library_dir() / "libdarknet.so"
    missing = [str(path) for path in (header, library) if not path.is_file()]
    if missing:
        return f"Darknet is not installed: no {' and no '.join(missing)}"
    return None


def _compiler_missing() -> str | None:
    if _compiler() is not None:
        return None
    if os.environ.get("CC", "").strip():
        return f"the C compiler $CC={os.environ['CC']} is not found"
    return "no C compiler: neither gcc nor cc is on PATH"


def unavailable_reason() -> str | None:
    """Why Darknet's forward pass cannot run here, or None when it can.

    Returns:
        None when the helper is built, or when Darknet's header, its library and a C compiler to
        build the helper are all there; otherwise what is missing, in one sentence.
    """
    if _darknet_missing():
        return f"{_darknet_missing()} (apt-get install darknet)"
    if not is_built() and _compiler_missing():
        return f"{_compiler_missing()} to build Darknet's forward pass (apt-get install gcc)"
    return None


def helper_path() -> Path:
    """Where the helper for the installed ``darknet.h`` is, or will be once built.

    Raises:
        OracleError: Darknet's header is not installed.
    """
    header = header_path()
    try:
        header_bytes = header.read_bytes()
    except OSError as exc:
        raise OracleError(
            f"{_SUBJECT} | cannot read Darknet's header {header} ({exc.strerror or exc}), expected darknet.h there.",
            hint="apt-get install darknet, or set DEPLOYKIT_DARKNET_INCLUDE to the directory holding darknet.h.",
        ) from exc
    source = resources.files(__package__).joinpath(SOURCE_NAME).read_bytes()
    digest = hashlib.sha256(source + header_bytes + str(library_dir()).encode()).hexdigest()[:16]
    return cache_dir() / f"darknet_dump-{digest}"


def is_built() -> bool:
    """Whether the helper for the installed Darknet is already in ``cache_dir()`` (nothing is compiled)."""
    if _darknet_missing():
        return False
    return helper_path().is_file()


def build_helper() -> Path:
    """Compile the helper into ``cache_dir()`` unless it is there already; return its path.

    The program is compiled to a temporary file in the cache directory and renamed into place, so
    a crash or a concurrent build never leaves a half-written helper. Files get the user's umask.

    Returns:
        The path of the compiled helper.

    Raises:
        OracleError: Darknet's header or library is missing, no C compiler is found, the cache
            directory cannot be written, or the compiler fails.
    """
    missing = _darknet_missing()
    if missing:
        raise OracleError(
            f"{_SUBJECT} | {missing}, expected Debian's darknet package (darknet.h and libdarknet.so).",
            hint="apt-get install darknet, or set DEPLOYKIT_DARKNET_INCLUDE and DEPLOYKIT_DARKNET_LIB to where "
            "darknet.h and libdarknet.so are; " + _ALTERNATIVE,
        )
    binary = helper_path()
    if binary.is_file():
        return binary
    compiler = _compiler()
    if compiler is None:
        raise OracleError(
            f"{_SUBJECT} | {_compiler_missing()}, expected a C compiler to build Darknet's forward pass "
            f"into {binary.parent}.",
            hint="apt-get install gcc, or set CC to a C compiler; " + _ALTERNATIVE,
        )
    try:
        binary.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OracleError(
            f"{_SUBJECT} | cannot create the cache directory {binary.parent} ({exc.strerror or exc}), "
            "expected a directory this user can write.",
            hint="set DEPLOYKIT_CACHE_DIR to a writable directory.",
        ) from exc
    if not os.access(binary.parent, os.W_OK | os.X_OK):
        raise OracleError(
            f"{_SUBJECT} | the cache directory {binary.parent} is not writable, expected one this user can write.",
            hint="set DEPLOYKIT_CACHE_DIR to a writable directory.",
        )
    header, library = header_path(), library_dir()
    with scratch_dir(binary) as scratch, resources.as_file(resources.files(__package__).joinpath(SOURCE_NAME)) as c:
        temporary = scratch / binary.name
        command = [
            *compiler,
            "-O2",
            "-o",
            str(temporary),
            str(c),
            f"-I{header.parent}",
            f"-L{library}",
            "-ldarknet",
            f"-Wl,-rpath,{library}",
            "-lm",
        ]
        try:
            completed = subprocess.run(command, capture_output=True, text=True, errors="replace")
        except OSError as exc:
            raise OracleError(
                f"{_SUBJECT} | the C compiler {shlex.join(compiler)} cannot be started ({exc.strerror or exc}), "
                "expected a working C compiler.",
                hint="apt-get install gcc, or set CC to a working C compiler.",
            ) from exc
        if completed.returncode != 0 or not temporary.is_file():
            lines = (completed.stderr or completed.stdout).strip().splitlines()
            # the first error says why; what follows it is mostly its consequences
            first = next((line.strip() for line in lines if "error" in line.lower()), lines[0] if lines else "")
            raise OracleError(
                f"{_SUBJECT} | {Path(compiler[0]).name} failed to compile {SOURCE_NAME} against {header} "
                f"(exit code {completed.returncode}): {first[:300] or 'no message'}; expected a clean build.",
                hint="the installed darknet.h may be from another Darknet fork than Debian's (pjreddie's); "
                + _ALTERNATIVE,
            )
        os.replace(temporary, binary)
    return binary


# What pjreddie's Darknet (Debian's libdarknet) does not implement: it reads such cfgs without an
# error and computes something else, so it is no oracle for them.
_ALEXEYAB_ONLY = (
    "group_id",
    "scale_x_y",
    "new_coords",
    "mish",
    "swish",
    "hard_mish",
    "hardswish",
    "gelu",
    "[sam]",
    "[scale_channels]",
    "[reorg3d]",
    "[local_avgpool]",
    "[implicit_",
    "[conv_lstm]",
)


def unsupported_reason(cfg: str | os.PathLike[str]) -> str | None:
    """Why pjreddie's Darknet (Debian's ``libdarknet``) is no oracle for ``cfg``, or None.

    Darknet reads a cfg that uses AlexeyAB's additions (route ``group_id``, ``scale_x_y``, mish ...)
    without an error and computes something else, so such a cfg is refused rather than run.

    Args:
        cfg: the Darknet ``.cfg`` (read as text; nothing is compiled or run).

    Returns:
        None, or which of AlexeyAB's additions the cfg uses, in one sentence.
    """
    text = Path(cfg).read_text(errors="replace").lower()
    found = sorted({word for word in _ALEXEYAB_ONLY if word in text})
    if found:
        return f"Debian's libdarknet (pjreddie's Darknet) does not implement {', '.join(found)} used by this cfg"
    return None


def _checked_layers(layers: object, cfg: Path, count: int) -> list[int]:
    """``layers`` as ints in ``range(count)``; Darknet would read a wrong index as another layer or as 0."""
    if isinstance(layers, (str, bytes, int, np.integer)) or not hasattr(layers, "__iter__"):
        raise OracleError(
            f"layers | got {layers!r} ({type(layers).__name__}), expected a list of layer indices.",
            hint="pass a list, e.g. [16, 23] for YOLOv3-tiny's [yolo] layers, or [16] for one.",
        )
    entries = list(layers)
    if not entries:
        raise OracleError(
            f"{_SUBJECT} | no layers to read, expected at least one layer index.",
            hint="pass the indices of the layers to read, e.g. the [yolo] layers.",
        )
    for entry in entries:
        if isinstance(entry, (bool, np.bool_)) or not isinstance(entry, (int, np.integer)):
            raise OracleError(
                f"layers | entry {entry!r} is a {type(entry).__name__}, expected int layer indices.",
                hint="pass ints: 0-based indices in the cfg's order ([net] not counted), e.g. [16, 23].",
            )
        if not 0 <= entry < count:
            raise OracleError(
                f"layers | {int(entry)} is out of range for '{cfg.name}', expected 0 to {count - 1} "
                f"(the cfg has {count} layers, [net] not counted).",
                hint="indices are 0-based in the cfg's order; negative indices are not supported.",
            )
    return [int(entry) for entry in entries]


def _checked_image(image: np.ndarray, cfg: Path, expected: tuple[int, int, int]) -> np.ndarray:
    """``image`` as ``(C, H, W)`` of the cfg's ``[net]``: Darknet reads any array of the right size."""
    array = np.asarray(image)
    if not (np.issubdtype(array.dtype, np.integer) or np.issubdtype(array.dtype, np.floating)):
        raise OracleError(
            f"image | dtype {array.dtype}, expected real numbers (passed to Darknet as float32).",
            hint="pass a float32 array, e.g. image.astype(np.float32).",
        )
    if array.shape in (expected, (1, *expected)):
        return array.reshape(expected)
    channels, height, width = expected
    if array.shape in ((height, width, channels), (1, height, width, channels)):
        hint = "the image is laid out HWC (height, width, channels); transpose it to CHW: image.transpose(2, 0, 1)."
    elif array.ndim == 4 and array.shape[0] != 1:
        hint = "pass one image; run Darknet once per image for a batch."
    else:
        hint = (
            f"resize the image to {width}x{height} with {channels} channels and lay it out as CHW "
            "(an HWC image: image.transpose(2, 0, 1))."
        )
    raise OracleError(
        f"image | shape {array.shape}, expected {expected} or {(1, *expected)} for '{cfg.name}' "
        "(channels, height, width from its [net]).",
        hint=hint,
    )


def _check_weights(weights: Path, network: Network) -> None:
    """The converter's exact-size check: Darknet reads a file of another net's weights without a word."""
    from deploykit.convert.darknet.weights import DarknetWeights

    try:
        with DarknetWeights(weights) as reader:
            reader.check_size(network)
    except DeployKitError as exc:
        raise OracleError(exc.message, hint=exc.hint) from exc
    except OSError as exc:
        raise OracleError(
            f"weights '{weights}' | cannot be read ({exc.strerror or exc}), expected a readable file.",
            hint="check the file's permissions.",
        ) from exc


def darknet_outputs(
    cfg: str | os.PathLike[str],
    weights: str | os.PathLike[str],
    image: np.ndarray,
    layers: Sequence[int],
    *,
    network: Network | None = None,
) -> dict[int, np.ndarray]:
    """Darknet's own outputs of ``layers`` for one image; builds the helper first if needed.

    Before anything is built or run, the inputs are checked in Python against the cfg (Darknet itself
    accepts them silently and computes something else): the cfg must be one pjreddie's Darknet
    implements (``unsupported_reason``), the image must be ``(C, H, W)`` or ``(1, C, H, W)`` of the
    cfg's ``[net]``, the weights must hold exactly the cfg's parameters (the converter's check), and
    ``layers`` must be a list of int indices of the cfg's layers.

    Args:
        cfg: the Darknet ``.cfg``; Darknet runs it at its ``[net]`` width and height.
        weights: the Darknet ``.weights``.
        image: one float image, ``(C, H, W)`` or ``(1, C, H, W)``, of the cfg's channels, height and width.
        layers: indices of the layers to read (0-based, as in the cfg order).
        network: the cfg as deploykit's parser already resolved it (the converter's), so it is not
            parsed again; default: parsed here.

    Returns:
        For each layer index, that layer's output as a flat float32 array (Darknet's C x H x W order).

    Raises:
        OracleError: an input does not fit the cfg (see above), the files are missing, deploykit's
            parser refuses the cfg, the helper cannot be built (see ``build_helper``), or Darknet
            failed or crashed on the cfg.
    """
    from deploykit.convert.darknet.layers import load_network

    cfg_path, weights_path = Path(cfg), Path(weights)
    for label, path in (("cfg", cfg_path), ("weights", weights_path)):
        if not path.is_file():
            raise OracleError(
                f"{_SUBJECT} | the {label} '{path}' is not a file, expected an existing Darknet {label}.",
                hint=f"pass the path of the Darknet .{label} file.",
            )
    unsupported = unsupported_reason(cfg_path)
    if unsupported:
        raise OracleError(
            f"Darknet '{cfg_path.name}' | {unsupported}, expected a cfg of the layers pjreddie's Darknet knows "
            "(YOLOv2/v3).",
            hint="Darknet would run it without an error and compute something else; " + _ALTERNATIVE,
        )
    if network is None:
        try:
            network = load_network(cfg_path)
        except DeployKitError as exc:
            raise OracleError(exc.message, hint=exc.hint) from exc
    indices = _checked_layers(layers, cfg_path, len(network.layers))
    array = _checked_image(image, cfg_path, (network.channels, network.height, network.width))
    _check_weights(weights_path, network)
    binary = build_helper()
    with tempfile.TemporaryDirectory(prefix="deploykit-darknet-") as directory:
        source, target = Path(directory) / "input.bin", Path(directory) / "output.bin"
        np.ascontiguousarray(array, dtype="<f4").tofile(source)
        command = [str(binary), str(cfg_path), str(weights_path), str(source), str(target), *map(str, indices)]
        completed = subprocess.run(command, capture_output=True, text=True, errors="replace")
        lines = completed.stderr.strip().splitlines()
        # Darknet exits 0 after printing "Couldn't open file" for a cfg it cannot read, and writes nothing.
        if completed.returncode != 0 or not target.is_file():
            raise OracleError(
                f"Darknet '{cfg_path.name}' | Darknet's forward pass failed ({describe_exit(completed.returncode)}): "
                f"{lines[-1] if lines else 'no message'}; expected it to run the cfg with these weights.",
                hint="pjreddie's Darknet (Debian's) knows the YOLOv2/v3 layers, not AlexeyAB's additions; "
                "check that the weights belong to the cfg, " + _ALTERNATIVE,
            )
        data = target.read_bytes()
    outputs, offset = {}, 0
    for index in indices:
        *_, count = np.frombuffer(data, dtype="<i4", count=4, offset=offset)
        offset += 16
        outputs[index] = np.frombuffer(data, dtype="<f4", count=int(count), offset=offset).copy()
        offset += 4 * int(count)
    return outputs
