"""ONNX → ncnn with pnnx, once per model and settings, into the converted-model cache.

An entry (``deploykit.backends.converted``, kind ``ncnn``) is keyed by the model's SHA-256, the pnnx
version, the input shapes and types and the conversion options. It holds ``model.ncnn.param``,
``model.ncnn.bin``, pnnx's log (``pnnx.log``) and the small files pnnx writes beside them; its record
is the blob, shape and batch index pnnx chose for each input and output. An entry without the
``.param``/``.bin`` pair or whose record does not read back is rebuilt like a damaged one.

This module runs pnnx and reads what it wrote; it never loads ncnn (``ncnn.py`` does).
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from deploykit.backends.converted import CachedConversion, converted
from deploykit.errors import BackendUnavailableError, UnsupportedModelError
from deploykit.io import file_sha256

ENTRY_VERSION = 2  # 2: the shared converted-model cache's entry.json (1 was ncnn's own layout)
NO_BATCH = 233
"""pnnx's (and ncnn's Python binding's) ``batch_index`` for a tensor without a batch axis."""
PNNX_TIMEOUT_S = 600
PNNX_VARIABLE = "DEPLOYKIT_PNNX"
"""Path of the pnnx executable to use instead of the ``pnnx`` package's (an own build)."""
PARAM_NAME, BIN_NAME, LOG_NAME = "model.ncnn.param", "model.ncnn.bin", "pnnx.log"

_PNNX_TYPES = {
    "float32": "f32",
    "float16": "f16",
    "float64": "f64",
    "int64": "i64",
    "int32": "i32",
    "int16": "i16",
    "int8": "i8",
    "uint8": "u8",
    "bool": "b",
}
_OPERAND = re.compile(r"#\S+=\(([-\d,?]*)\)(\w+)")
_FED = re.compile(r'ex\.input\("(in\d+)", ncnn\.Mat\(\w+\.numpy\(\), batch_index=(\d+)\)')
_READ = re.compile(r"out\.append\(torch\.from_numpy\((out\d+)\.numpy\(batch_index=(\d+)\)\)\)")

_EXTRA_HINT = "pip install 'deploykit[ncnn]' (it installs ncnn and pnnx)."


@dataclass(frozen=True)
class Port:
    """One ncnn input or output as pnnx made it: its blob name, full shape and batch axis (or ``NO_BATCH``)."""

    blob: str
    shape: tuple[int, ...]
    batch_index: int


@dataclass(frozen=True)
class Conversion:
    """A converted model in the cache: where its files are and how its blobs map to the ONNX tensors."""

    directory: Path
    inputs: tuple[Port, ...]
    outputs: tuple[Port, ...]

    @property
    def param(self) -> Path:
        return self.directory / PARAM_NAME

    @property
    def bin(self) -> Path:
        return self.directory / BIN_NAME

    @property
    def log(self) -> Path:
        return self.directory / LOG_NAME


def pnnx_executable() -> Path:
    """The pnnx program: ``$DEPLOYKIT_PNNX`` when set, else the one in the ``pnnx`` package.

    Raises:
        BackendUnavailableError: pnnx is not installed, or the program is missing or not executable.
    """
    given = os.environ.get(PNNX_VARIABLE, "").strip()
    if given:
        path, where = Path(given).expanduser(), f"${PNNX_VARIABLE}={given}"
    else:
        try:
            import pnnx
        except Exception as exc:
            raise BackendUnavailableError(
                f"backend 'ncnn' | cannot import 'pnnx', which converts ONNX models for ncnn "
                f"({type(exc).__name__}: {exc}).",
                hint=_EXTRA_HINT,
            ) from exc
        path, where = Path(pnnx.EXEC_PATH), "the pnnx package"
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise BackendUnavailableError(
            f"backend 'ncnn' | the pnnx executable {path} (from {where}) is missing or not executable.",
            hint=_EXTRA_HINT + f" Or unset ${PNNX_VARIABLE}.",
        )
    return path


def pnnx_version() -> str:
    if os.environ.get(PNNX_VARIABLE, "").strip():
        return "pnnx (" + os.environ[PNNX_VARIABLE].strip() + ")"
    try:
        return f"pnnx {metadata.version('pnnx')}"
    except metadata.PackageNotFoundError:
        return "pnnx (unknown version)"


def pnnx_type(name: str, dtype: np.dtype[Any]) -> str:
    """pnnx's spelling of an input's element type (``f32``, ``i64`` ...)."""
    spelled = _PNNX_TYPES.get(np.dtype(dtype).name)
    if spelled is None:
        raise UnsupportedModelError(
            f"input '{name}' | has element type {np.dtype(dtype).name}; pnnx takes {', '.join(_PNNX_TYPES)}.",
            hint="cast the input to float32 in the model, or use another backend.",
        )
    return spelled


def cache_key(model_sha256: str, shapes: Sequence[tuple[int, ...]], types: Sequence[str], fp16: bool) -> dict[str, Any]:
    """Everything a conversion depends on (the entry is named by its digest)."""
    return {
        "entry_version": ENTRY_VERSION,
        "model_sha256": model_sha256,
        "pnnx": pnnx_version(),
        "input_shapes": [list(s) for s in shapes],
        "input_types": list(types),
        "options": {"fp16": fp16, "optlevel": 2},
    }


def convert(
    model_path: Path,
    shapes: Sequence[tuple[int, ...]],
    types: Sequence[str],
    *,
    fp16: bool,
    root: Path | None = None,
) -> Conversion:
    """The ncnn files for ``model_path`` at ``shapes``: from the cache, or made by pnnx now.

    Args:
        model_path: the ONNX file.
        shapes: one fixed shape per graph input, in graph order.
        types: pnnx's type per input (``pnnx_type``).
        fp16: store weights as float16 in the ``.bin`` (pnnx ``fp16=1``); False keeps them f32.
        root: the cache directory (default ``cache_dir()/ncnn``).

    Raises:
        BackendUnavailableError: no pnnx executable.
        UnsupportedModelError: pnnx failed or wrote something ncnn cannot be fed from.
    """
    key = cache_key(file_sha256(model_path), shapes, types, fp16)

    def build(scratch: Path) -> dict[str, Any]:
        _run_pnnx(model_path, shapes, types, fp16, scratch)
        return _record_ports(scratch, model_path)

    entry = converted("ncnn", key, build, root=root, usable=lambda found: _conversion(found) is not None)
    conversion = _conversion(entry)
    assert conversion is not None, "converted() returns only entries _conversion accepts"
    return conversion


def _run_pnnx(model_path: Path, shapes: Sequence[tuple[int, ...]], types: Sequence[str], fp16: bool, out: Path) -> None:
    executable = pnnx_executable()
    source = out / "model.onnx"  # pnnx writes its side files beside its input: keep them in the scratch dir
    source.symlink_to(model_path.resolve())
    inputshape = ",".join(
        f"[{','.join(str(d) for d in shape)}]{kind}" for shape, kind in zip(shapes, types, strict=True)
    )
    command = [
        str(executable),
        str(source),
        f"inputshape={inputshape}",
        f"fp16={int(fp16)}",
        "optlevel=2",
        "device=cpu",
        f"ncnnparam={out / PARAM_NAME}",
        f"ncnnbin={out / BIN_NAME}",
        f"ncnnpy={out / 'model_ncnn.py'}",
        f"pnnxparam={out / 'model.pnnx.param'}",
        f"pnnxbin={out / 'model.pnnx.bin'}",
        f"pnnxpy={out / 'model_pnnx.py'}",
        f"pnnxonnx={out / 'model.pnnx.onnx'}",
    ]
    try:
        done = subprocess.run(
            command, cwd=out, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=PNNX_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise UnsupportedModelError(
            f"backend 'ncnn' | pnnx did not finish converting '{model_path.name}' in {PNNX_TIMEOUT_S} s.",
            hint="try another backend, or convert it with pnnx by hand to see where it stalls.",
        ) from exc
    log = done.stdout.decode("utf-8", "replace")
    (out / LOG_NAME).write_text(log)
    if done.returncode != 0 or not (out / PARAM_NAME).is_file() or not (out / BIN_NAME).is_file():
        how = f"exit status {done.returncode}" if done.returncode >= 0 else f"signal {-done.returncode}"
        raise UnsupportedModelError(
            f"backend 'ncnn' | pnnx could not convert '{model_path.name}' ({how}): {_log_reason(log)}.",
            hint="run 'deploykit inspect' on the model for unusual ops, or try another backend.",
        )


def _log_reason(log: str) -> str:
    lines = [
        line.strip() for line in log.splitlines() if line.strip() and not line.startswith(("#", "┌", "│", "├", "└"))
    ]
    said = [line for line in lines if re.search(r"error|not supported|unsupported|failed|ignore", line, re.I)]
    return "; ".join((said or lines or ["no output"])[-3:])


_IGNORED = re.compile(r"ignore (\S+) \S+ param (\w+)=(\S+)$")


def ignored_params(log: str) -> list[str]:
    """pnnx's ``ignore OP NAME param KEY=VALUE`` lines: attributes it dropped while converting,
    less those that hold the ONNX operator's own default (pnnx drops ``Swish``'s ``alpha=1.0`` and
    computes x·sigmoid(x), which is what that default means)."""
    lines = [line.strip() for line in log.splitlines() if line.strip().startswith("ignore ")]
    return [line for line in lines if not _is_onnx_default(line)]


def _is_onnx_default(line: str) -> bool:
    """Whether an ``ignore`` line drops a number equal to the default the ONNX schema states."""
    import onnx
    from onnx import AttributeProto, defs

    match = _IGNORED.fullmatch(line)
    if match is None:
        return False
    op, key, value = match.groups()
    try:
        attribute = defs.get_schema(op).attributes.get(key)
        number = float(value)
    except (defs.SchemaError, ValueError):
        return False  # a torch op pnnx made (torch.where ...), or a value that is not one number
    if attribute is None or attribute.default_value.type not in (AttributeProto.FLOAT, AttributeProto.INT):
        return False
    return bool(number == float(onnx.helper.get_attribute_value(attribute.default_value)))


def _ports(text: str, pattern: re.Pattern[str]) -> list[tuple[str, int]]:
    return [(name, int(index)) for name, index in pattern.findall(text)]


def _shapes(param_text: str, kind: str) -> list[tuple[int, ...]]:
    """Shapes of the ``pnnx.Input`` or ``pnnx.Output`` operands in a ``.pnnx.param``, in order."""
    found = []
    for line in param_text.splitlines():
        if line.startswith(kind + " "):
            match = _OPERAND.search(line)
            dims = match.group(1) if match else ""
            found.append(tuple(int(d) if d.lstrip("-").isdigit() else -1 for d in dims.split(",") if d))
    return found


def _record_ports(out: Path, model_path: Path) -> dict[str, Any]:
    """What pnnx made of each input and output (read from its script and graph), for the entry's record;
    the large files pnnx wrote that a session never reads again are removed."""
    script = (out / "model_ncnn.py").read_text()
    pnnx_param = (out / "model.pnnx.param").read_text()
    fed, read = _ports(script, _FED), _ports(script, _READ)
    in_shapes, out_shapes = _shapes(pnnx_param, "pnnx.Input"), _shapes(pnnx_param, "pnnx.Output")
    if len(fed) != len(in_shapes) or len(read) != len(out_shapes):
        raise UnsupportedModelError(
            f"backend 'ncnn' | pnnx's conversion of '{model_path.name}' names {len(fed)} input(s) and {len(read)} "
            f"output(s) in its ncnn script but {len(in_shapes)} and {len(out_shapes)} in its graph.",
            hint="try another backend; this pnnx version handles the model inconsistently.",
        )
    for name in ("model.onnx", "model.pnnx.bin", "model.pnnx.onnx", "model.pnnxsim.onnx"):  # large, not read again
        (out / name).unlink(missing_ok=True)
    return {
        "inputs": [asdict(Port(b, s, i)) for (b, i), s in zip(fed, in_shapes, strict=True)],
        "outputs": [asdict(Port(b, s, i)) for (b, i), s in zip(read, out_shapes, strict=True)],
    }


def _conversion(entry: CachedConversion) -> Conversion | None:
    """The ncnn conversion in an intact cache entry, or None when it lacks the ``.param``/``.bin`` pair or
    its record does not read back as ports."""
    if PARAM_NAME not in entry.files or BIN_NAME not in entry.files:
        return None
    try:
        inputs = tuple(_port(p) for p in entry.record["inputs"])
        outputs = tuple(_port(p) for p in entry.record["outputs"])
    except (ValueError, KeyError, TypeError):
        return None
    return Conversion(entry.directory, inputs, outputs)


def _port(recorded: Mapping[str, Any]) -> Port:
    return Port(str(recorded["blob"]), tuple(int(d) for d in recorded["shape"]), int(recorded["batch_index"]))
