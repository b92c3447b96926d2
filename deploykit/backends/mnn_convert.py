"""ONNX → MNN with MNN's converter, once per model and converter version, into the converted-model cache.

The converter is called through its compiled binding (``_tools.mnnconvert``), in a child process of
this interpreter: the child's stdout (MNN prints a banner and its progress there) becomes the entry's
``convert.log`` instead of mixing into deploykit's output, and a converter that aborts costs that
child only. The ``MNN.tools`` entry points (``mnnconvert`` on PATH) are never used: importing
``MNN.tools`` runs ``pip install -U aliyun-log-python-sdk`` and sends the model's id and the
converter's arguments to a logging service.

An entry holds ``model.mnn`` and ``convert.log`` (``deploykit.backends.converted``). This module runs
the converter and reads its log; it never loads MNN's runtime (``mnn.py`` does).
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from deploykit.backends.converted import CachedConversion, converted
from deploykit.errors import BackendUnavailableError, UnsupportedModelError
from deploykit.model import Model

ENTRY_VERSION = 1
CONVERT_TIMEOUT_S = 600
MODEL_NAME, LOG_NAME = "model.mnn", "convert.log"
CONVERTER_VARIABLE = "DEPLOYKIT_MNN_CONVERTER"
"""The Python interpreter (with the ``mnn`` package) that runs the converter instead of this one, or
``off`` to make the converter unavailable (a ``.mnn`` file still opens)."""
BIZ_CODE = "deploykit"
"""The tag MNN's converter writes into a model (``bizCode``); without one it prints a complaint."""

# The child: the converter's binding and nothing else (``MNN.tools`` is never imported).
_CHILD = "import sys\nimport _tools\n_tools.mnnconvert(['mnnconvert', *sys.argv[1:]])\n"
_NOT_SUPPORTED = re.compile(r"These Op Not Support:\s*(.*)")
_STAMP = re.compile(r"^\[\d\d:\d\d:\d\d\] :\d+: ")
"""The time and source line MNN's log puts before a message."""
_EXTRA_HINT = "pip install 'deploykit[mnn]'."


def converter_version() -> str:
    """``mnn 3.6.1``: the converter ships in the runtime's package, so the two versions are one.

    Raises:
        BackendUnavailableError: the ``mnn`` package is not installed, or the converter is turned off.
    """
    import os

    if os.environ.get(CONVERTER_VARIABLE, "").strip().lower() == "off":
        raise BackendUnavailableError(
            f"backend 'mnn' | MNN's converter is turned off (${CONVERTER_VARIABLE}=off), so an ONNX model "
            "cannot be converted.",
            hint=f"unset ${CONVERTER_VARIABLE}, or open a .mnn file.",
        )
    try:
        return f"mnn {metadata.version('mnn')}"
    except metadata.PackageNotFoundError as exc:
        raise BackendUnavailableError(
            "backend 'mnn' | the 'mnn' package, which holds MNN's converter, is not installed.", hint=_EXTRA_HINT
        ) from exc


def converter_python() -> str:
    """The interpreter that runs the converter: ``$DEPLOYKIT_MNN_CONVERTER`` when it names one, else this one."""
    import os

    given = os.environ.get(CONVERTER_VARIABLE, "").strip()
    return given if given and given.lower() != "off" else sys.executable


def converter_arguments(source: Path, target: Path, *, fp16_weights: bool) -> list[str]:
    """The converter's command line (after the program name)."""
    arguments = ["-f", "ONNX", "--modelFile", str(source), "--MNNModel", str(target), "--bizCode", BIZ_CODE]
    return arguments + (["--fp16"] if fp16_weights else [])


def cache_key(model_sha256: str, *, fp16_weights: bool) -> dict[str, Any]:
    """Everything a conversion depends on (the entry is named by its digest)."""
    return {
        "entry_version": ENTRY_VERSION,
        "model_sha256": model_sha256,
        "converter": converter_version(),
        "options": {"fp16_weights": fp16_weights},
    }


def convert(model: Model, *, fp16_weights: bool = False, root: Path | None = None) -> CachedConversion:
    """The ``.mnn`` file for ``model`` (an ONNX ``Model``): from the cache, or converted now.

    Args:
        model: the ONNX model (its file is ``model.path``, its hash ``model.sha256``).
        fp16_weights: store convolution weights as float16 (the converter's ``--fp16``).
        root: the cache directory (default ``cache_dir()/mnn``).

    Raises:
        BackendUnavailableError: MNN's converter is not installed (or turned off).
        UnsupportedModelError: the converter cannot take the model: every layer it cannot take is
            named, with the ONNX nodes of that type.
    """
    key = cache_key(model.sha256, fp16_weights=fp16_weights)

    def build(scratch: Path) -> dict[str, Any]:
        log = run_converter(model, scratch / MODEL_NAME, fp16_weights=fp16_weights, cwd=scratch)
        (scratch / LOG_NAME).write_text(log)
        return {"source": model.path.name}

    return converted("mnn", key, build, root=root)


def run_converter(model: Model, target: Path, *, fp16_weights: bool, cwd: Path) -> str:
    """Convert ``model`` into ``target`` in a child process; return the converter's log.

    Raises:
        UnsupportedModelError: the converter failed, timed out or wrote nothing.
    """
    # absolute: the converter runs in ``cwd``, and a model named relative to the user's folder is not there
    arguments = converter_arguments(model.path.resolve(), target.resolve(), fp16_weights=fp16_weights)
    command = [converter_python(), "-c", _CHILD, *arguments]
    try:
        done = subprocess.run(
            command,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=CONVERT_TIMEOUT_S,
            check=False,
        )
    except OSError as exc:
        raise BackendUnavailableError(
            f"backend 'mnn' | cannot start {command[0]} to run MNN's converter: {exc.strerror or exc}.",
            hint=f"point ${CONVERTER_VARIABLE} at a Python interpreter that has the mnn package, or unset it.",
        ) from exc
    except subprocess.TimeoutExpired as exc:
        raise UnsupportedModelError(
            f"backend 'mnn' | MNN's converter did not finish converting '{model.name}' in {CONVERT_TIMEOUT_S} s.",
            hint="try another backend.",
        ) from exc
    log = done.stdout.decode("utf-8", "replace")
    if done.returncode == 0 and "Converted Success" in log and target.is_file() and target.stat().st_size:
        return log
    unsupported = unsupported_ops(log)
    if unsupported:
        raise unsupported_layers_error(model, unsupported)
    how = f"exit status {done.returncode}" if done.returncode >= 0 else f"signal {-done.returncode}"
    raise UnsupportedModelError(
        f"backend 'mnn' | MNN's converter could not convert '{model.name}' ({how}): {log_reason(log)}.",
        hint="run 'deploykit inspect' on the model for unusual ops, or try another backend.",
    )


def unsupported_ops(log: str) -> list[str]:
    """The ONNX op types the converter's log says it cannot take (``ONNX::Hardmax`` → ``Hardmax``), in order."""
    found: list[str] = []
    for match in _NOT_SUPPORTED.finditer(log):
        for token in match.group(1).split():
            op = token.rpartition("::")[2].strip(",")
            if op and op not in found:
                found.append(op)
    return found


def unsupported_layers_error(model: Model, ops: Sequence[str]) -> UnsupportedModelError:
    """One error naming every layer MNN cannot take: each op type with the graph's nodes of that type."""
    from deploykit.model import walk_nodes

    nodes: dict[str, list[str]] = {op: [] for op in ops}
    proto = model.proto
    if proto is None:
        import onnx

        try:
            proto = onnx.load(str(model.path), load_external_data=False)
        except Exception:  # the op types alone still say what to replace
            proto = None
    if proto is not None:
        for index, node in enumerate(walk_nodes(proto.graph)):
            if node.op_type in nodes:
                nodes[node.op_type].append(node.name or f"node {index} making {', '.join(node.output)}")
    count = sum(len(names) for names in nodes.values()) or len(ops)
    listed = "; ".join(f"{op} ({', '.join(nodes[op])})" if nodes[op] else op for op in ops)
    return UnsupportedModelError(
        f"backend 'mnn' | MNN's converter cannot take {count} layer(s) of '{model.name}': it has no conversion for "
        f"{listed}.",
        hint="run the model on another backend (e.g. -b onnxruntime), or export it without those ops; "
        "'deploykit inspect' lists the model's ops.",
    )


def log_reason(log: str) -> str:
    """The converter's last lines that say something went wrong (else its last lines)."""
    lines = [_STAMP.sub("", line).strip() for line in log.splitlines() if "device supports" not in line]
    lines = [line for line in lines if line]
    said = [line for line in lines if re.search(r"error|not support|unsupport|fail|abort|what\(\)", line, re.I)]
    return "; ".join((said or lines or ["no output"])[-3:])
