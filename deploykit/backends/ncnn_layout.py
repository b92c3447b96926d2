"""How an ncnn model maps to the ONNX graph it came from: ``NcnnLayout``, made from an ``.onnx``
(through the pnnx cache) or read from a native ``.param`` + ``.bin`` pair and its ``.json``.

Every check that stands between a conversion and a session lives here: fixed shapes (from the model,
the ``shape`` option or metadata, else an error naming the input), pnnx's ports against the ONNX
interface, layer types ncnn has, attributes pnnx dropped, a ``.bin`` that belongs to its ``.param``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from deploykit.backends.converted import interface_file
from deploykit.backends.ncnn_convert import (
    NO_BATCH,
    Conversion,
    Port,
    convert,
    file_sha256,
    ignored_params,
    pnnx_type,
)
from deploykit.errors import ModelError, ModelNotFoundError, UnsupportedModelError, UsageError
from deploykit.inputs import parse_input_settings, plan_inputs
from deploykit.model import Model, as_model
from deploykit.tensors import TENSOR, Dim, TensorSpec

IO_FORMAT = "deploykit-ncnn-io"
"""The ``format`` field of the ``.json`` beside an exported ``.param``/``.bin`` pair."""


@dataclass
class NcnnLayout:
    """An ncnn model and how it maps to the ONNX graph it came from (``deploykit export ncnn`` writes it
    into the ``.json`` beside the pair, and reads it back).

    Attributes:
        subject: how messages name the model (``'model.onnx'``).
        param, bin: the ncnn files.
        specs_in, specs_out: the ONNX-side tensors (names, dtypes, shapes as a session takes them).
        inputs, outputs: the ncnn blob of each tensor, in the same order.
        batch_axes: tensor name → the dynamic batch axis run sample by sample, or None.
        metadata: the ONNX model's ``metadata_props``.
        weights: how the ``.bin`` stores weights: ``f32`` or ``f16`` (pnnx ``fp16=1``).
    """

    subject: str
    param: Path
    bin: Path
    specs_in: list[TensorSpec]
    specs_out: list[TensorSpec]
    inputs: list[Port]
    outputs: list[Port]
    batch_axes: dict[str, int | None]
    metadata: dict[str, str]
    weights: str = "f32"

    def io_document(self, source: Path) -> dict[str, Any]:
        """The ``.json`` written beside an exported pair: the name map and everything a session needs."""

        def tensors(specs: list[TensorSpec], ports: list[Port]) -> list[dict[str, Any]]:
            return [
                {
                    **spec.to_dict(),
                    "blob": port.blob,
                    "ncnn_shape": list(port.shape),
                    "batch_index": port.batch_index,
                    "batch_axis": self.batch_axes.get(spec.name),
                }
                for spec, port in zip(specs, ports, strict=True)
            ]

        return {
            "format": IO_FORMAT,
            "version": 1,
            "source": source.name,
            "source_sha256": file_sha256(source),
            "weights": self.weights,
            "param_sha256": file_sha256(self.param),
            "bin_sha256": file_sha256(self.bin),
            "inputs": tensors(self.specs_in, self.inputs),
            "outputs": tensors(self.specs_out, self.outputs),
            "metadata": self.metadata,
        }


def _shape_settings(shape: str | None) -> list[str]:
    return [part.strip() for part in (shape or "").split(";") if part.strip()]


def onnx_layout(model: Model | Path, shape: str | None, *, fp16_weights: bool) -> NcnnLayout:
    interface = as_model(model)
    model_path = interface.path
    subject = f"'{model_path.name}'"
    _refuse_non_tensors(interface, subject)
    try:
        plan = plan_inputs(
            interface.inputs,
            interface.metadata_props,
            settings=parse_input_settings(_shape_settings(shape)),
            model_name=subject,
        )
    except UsageError as exc:
        if "is dynamic" not in exc.message and "unknown rank" not in exc.message:
            raise
        raise UnsupportedModelError(
            exc.message + " pnnx converts a model at fixed input shapes only.",
            hint="give the shape as the backend option shape=NAME:SHAPE (--option shape=NAME:SHAPE on the command "
            "line; NAME:SHAPE;NAME:SHAPE for several inputs), e.g. shape="
            + ";".join(
                f"{s.name}:{'x'.join(str(d) if isinstance(d, int) else 'N' for d in s.shape or ())}"
                for s in interface.inputs
                if not s.is_static
            )
            + " with N replaced by the size.",
        ) from exc
    # only a dynamic axis is split into samples; a fixed one is the model's own
    batch_axes: dict[str, int | None] = {
        s.name: axis
        for s in interface.inputs
        if (axis := plan.batch_axes.get(s.name)) is not None and s.shape and not isinstance(s.shape[axis], int)
    }
    typed = [spec for spec in interface.outputs if spec.dtype != np.float32]
    shapes = [plan.shapes[s.name] for s in interface.inputs]
    types = [pnnx_type(s.name, s.dtype) for s in interface.inputs]
    try:
        conversion = convert(model_path, shapes, types, fp16=fp16_weights)
    except UnsupportedModelError:
        if typed:  # the output types are the reason deploykit knows of; pnnx's own failure may follow from them
            raise _typed_outputs_error(subject, typed, []) from None
        raise
    # every reason at once: a hint that fixes one problem of several would not make the model run
    unknown = unknown_layers(conversion.param)
    if typed or unknown:
        raise _typed_outputs_error(subject, typed, unknown) if typed else _unknown_layers_error(subject, unknown)
    _check_conversion(conversion, list(interface.inputs), list(interface.outputs), shapes, subject)
    symbols = {s.shape[axis] for s in interface.inputs if (axis := batch_axes.get(s.name)) is not None and s.shape}
    inputs = [
        TensorSpec(spec.name, spec.dtype, _with_batch(plan.shapes[spec.name], spec.shape, batch_axes.get(spec.name)))
        for spec in interface.inputs
    ]
    outputs = []
    for spec, port in zip(interface.outputs, conversion.outputs, strict=True):
        axis = _output_batch_axis(spec, symbols) if batch_axes else None
        batch_axes[spec.name] = axis
        outputs.append(TensorSpec(spec.name, spec.dtype, _with_batch(port.shape, spec.shape, axis)))
    return NcnnLayout(
        subject,
        conversion.param,
        conversion.bin,
        inputs,
        outputs,
        list(conversion.inputs),
        list(conversion.outputs),
        batch_axes,
        dict(interface.metadata_props),
        "f16" if fp16_weights else "f32",
    )


def _with_batch(shape: tuple[int, ...], declared: tuple[Dim, ...] | None, axis: int | None) -> tuple[Dim, ...]:
    """The fixed ``shape`` with the batch axis given back its symbol (it is fed at any size)."""
    if axis is None or declared is None:
        return tuple(shape)
    return tuple(declared[i] if i == axis else d for i, d in enumerate(shape))


def _output_batch_axis(spec: TensorSpec, symbols: set[Dim]) -> int | None:
    if not spec.shape:
        return None
    for axis, dim in enumerate(spec.shape):
        if isinstance(dim, str) and dim in symbols:
            return axis
    return 0 if not isinstance(spec.shape[0], int) else None


def _check_conversion(
    conversion: Conversion,
    inputs: list[TensorSpec],
    outputs: list[TensorSpec],
    shapes: list[tuple[int, ...]],
    subject: str,
) -> None:
    """Every pnnx port against the ONNX interface: counts, input shapes as fed, output shapes as declared."""
    check_layers(conversion.param, subject)
    ignored = ignored_params(conversion.log.read_text() if conversion.log.exists() else "")
    if ignored:
        raise UnsupportedModelError(
            f"backend 'ncnn' | pnnx dropped attributes while converting {subject} ({'; '.join(ignored)}), so "
            "the ncnn graph would compute something else.",
            hint=f"try another backend; pnnx's log is {conversion.log}.",
        )
    if len(conversion.inputs) != len(inputs) or len(conversion.outputs) != len(outputs):
        raise UnsupportedModelError(
            f"backend 'ncnn' | pnnx turned {subject} into a graph with {len(conversion.inputs)} input(s) and "
            f"{len(conversion.outputs)} output(s); the ONNX graph has {len(inputs)} and {len(outputs)}.",
            hint=f"pnnx drops inputs that no output uses and merges equal outputs; pnnx's log is {conversion.log}.",
        )
    for spec, shape, port in zip(inputs, shapes, conversion.inputs, strict=True):
        if port.shape != shape:
            raise UnsupportedModelError(
                f"input '{spec.name}' | pnnx's ncnn graph takes {port.shape} as {port.blob}, fed {shape}.",
                hint="try another backend.",
            )
        _check_rank(spec.name, port, subject)
    for spec, port in zip(outputs, conversion.outputs, strict=True):
        declared = spec.shape
        if declared is not None and (
            len(declared) != len(port.shape)
            or any(isinstance(d, int) and d != p for d, p in zip(declared, port.shape, strict=True))
        ):
            raise UnsupportedModelError(
                f"output '{spec.name}' | pnnx's ncnn graph gives {port.shape} as {port.blob}, the ONNX graph "
                f"declares {spec.shape_text()}.",
                hint="try another backend.",
            )
        _check_rank(spec.name, port, subject)


def _check_rank(name: str, port: Port, subject: str) -> None:
    rank = len(port.shape) - (port.batch_index != NO_BATCH)
    if rank > 4:
        raise UnsupportedModelError(
            f"tensor '{name}' | of {subject} has {rank} axes besides the batch; an ncnn Mat holds at most 4.",
            hint="try another backend.",
        )


def unknown_layers(param: Path) -> list[tuple[str, str]]:
    """Every (layer type, layer name) of a .param that ncnn has no layer for: pnnx leaves ops it cannot
    map under their own name (``Gather``, ``torch.gt``, ``Tensor.slice``, ``pnnx.Expression`` ...)."""
    import ncnn

    unknown = []
    for line in param.read_text(errors="replace").splitlines()[2:]:
        fields = line.split()
        if len(fields) >= 2 and ncnn.layer_to_index(fields[0]) < 0:
            unknown.append((fields[0], fields[1]))
    return unknown


MAX_NAMED_NODES = 3
"""Nodes named per operator in a message; the rest are counted."""

_UNKNOWN_LAYERS_HINT = (
    "run it on another backend (-b onnxruntime or -b openvino); or, when those nodes are post-processing (a "
    "detector's box decoding and NMS: comparisons, strided slices, casts), export the model without them and do "
    "that part in Python."
)


def describe_layers(unknown: Sequence[tuple[str, str]]) -> str:
    """``torch.gt (node 'gt_1'), Tensor.to ×2 (nodes 'to_2', 'to_3')``: every operator, each once, in order."""
    by_type: dict[str, list[str]] = {}
    for kind, name in unknown:
        by_type.setdefault(kind, []).append(name)
    parts = []
    for kind, names in by_type.items():
        shown = ", ".join(f"'{n}'" for n in names[:MAX_NAMED_NODES])
        more = f" and {len(names) - MAX_NAMED_NODES} more" if len(names) > MAX_NAMED_NODES else ""
        count = f" ×{len(names)}" if len(names) > 1 else ""
        parts.append(f"{kind}{count} (node{'s' if len(names) > 1 else ''} {shown}{more})")
    return ", ".join(parts)


def _unknown_layers_error(subject: str, unknown: Sequence[tuple[str, str]]) -> UnsupportedModelError:
    plural = "operators" if len({kind for kind, _ in unknown}) > 1 else "operator"
    return UnsupportedModelError(
        f"backend 'ncnn' | cannot run {subject}: ncnn has no layer for {plural} {describe_layers(unknown)}.",
        hint=_UNKNOWN_LAYERS_HINT,
    )


def _refuse_non_tensors(interface: Model, subject: str) -> None:
    """A sequence or optional input or output, refused before pnnx runs: an ncnn blob is one tensor
    (a ``Mat``), so such a value has no ncnn counterpart, and pnnx would fail on it in its own words."""
    found = [
        f"{side} '{spec.name}' is a {spec.type_text()}"
        for side, specs in (("input", interface.inputs), ("output", interface.outputs))
        for spec in specs
        if spec.kind != TENSOR
    ]
    if not found:
        return
    head, _, rest = found[0].partition(" is ")
    said = f"{head} | is {rest}" if len(found) == 1 else f"{subject} | " + "; ".join(found)
    raise UnsupportedModelError(
        f"{said}; ncnn's inputs and outputs are single tensors (float32 Mats), it has no sequence or optional values.",
        hint="return tensors instead (each item as its own output, or a Concat of them), or use another backend "
        "(onnxruntime runs sequences).",
    )


def _typed_outputs_error(
    subject: str, typed: Sequence[TensorSpec], unknown: Sequence[tuple[str, str]]
) -> UnsupportedModelError:
    """Outputs that are not float32 (ncnn returns float32 only), with the layers ncnn lacks when there are any."""
    names = ", ".join(f"'{s.name}'" for s in typed)
    kinds = ", ".join(dict.fromkeys(s.dtype.name for s in typed))
    verb = "have" if len(typed) > 1 else "has"
    if not unknown:
        return UnsupportedModelError(
            f"output {names} | {verb} element type {kinds}; ncnn returns float32 tensors only, so deploykit "
            "cannot give it back as the ONNX graph types it.",
            hint="cast the output to float32 in the model, or use another backend.",
        )
    return UnsupportedModelError(
        f"backend 'ncnn' | cannot run {subject}: ncnn has no layer for {describe_layers(unknown)}; and output "
        f"{names} {verb} element type {kinds} (ncnn returns float32 tensors only), so a cast alone would not make "
        "it run.",
        hint=_UNKNOWN_LAYERS_HINT,
    )


def check_layers(param: Path, subject: str) -> None:
    """Every layer type in a .param must be one ncnn has, else an error listing every one it lacks
    (ncnn itself would refuse the first without saying which)."""
    unknown = unknown_layers(param)
    if unknown:
        raise _unknown_layers_error(subject, unknown)


def weights_file(param: Path) -> Path:
    """An ncnn model's weights: the ``.bin`` of the same name beside its ``.param``."""
    return param.with_suffix(".bin")


def native_layout(param: Path) -> NcnnLayout:
    """A ``.param`` + ``.bin`` pair; the ONNX names and shapes from the ``.json`` beside it when there is one."""
    import ncnn

    if not param.is_file():
        raise ModelNotFoundError(
            f"model '{param}' | does not exist or is not a file.", hint="check the path (and the .param suffix)."
        )
    bin_path = weights_file(param)
    if not bin_path.is_file():
        raise ModelNotFoundError(
            f"model '{param.name}' | has no weights file {bin_path.name} beside it; an ncnn model is a .param "
            "and a .bin with the same name.",
            hint="put the .bin written with this .param next to it (deploykit export ncnn writes both).",
        )
    io_path = interface_file(param)
    subject = f"'{param.name}'"
    if not io_path.is_file():
        net = ncnn.Net()
        if net.load_param(str(param)) != 0:
            raise UnsupportedModelError(
                f"backend 'ncnn' | cannot read {subject}: it is not an ncnn .param file.",
                hint="pass a .param written by pnnx or deploykit export ncnn.",
            )
        _check_weights_size(param, bin_path)
        ins = [Port(b, (), NO_BATCH) for b in net.input_names()]
        outs = [Port(b, (), NO_BATCH) for b in net.output_names()]
        return NcnnLayout(
            subject,
            param,
            bin_path,
            [TensorSpec(p.blob, np.dtype(np.float32), None) for p in ins],
            [TensorSpec(p.blob, np.dtype(np.float32), None) for p in outs],
            ins,
            outs,
            {},
            {},
        )
    try:
        io = json.loads(io_path.read_text())
        if io.get("format") != IO_FORMAT:
            raise ValueError(f"format is {io.get('format')!r}")
        tensors = {
            side: [
                (
                    TensorSpec.from_dict(t),
                    Port(t["blob"], tuple(t["ncnn_shape"]), int(t["batch_index"])),
                    t.get("batch_axis"),
                )
                for t in io[side]
            ]
            for side in ("inputs", "outputs")
        }
        expected_bin = io["bin_sha256"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ModelError(
            f"model '{param.name}' | its interface file {io_path.name} is not one deploykit export ncnn wrote ({exc}).",
            hint=f"export the model again, or remove {io_path.name} to open the pair with ncnn's own blob names.",
        ) from exc
    if file_sha256(bin_path) != expected_bin:
        raise ModelError(
            f"model '{param.name}' | its weights file {bin_path.name} is not the one it was exported with "
            f"(SHA-256 differs from {io_path.name}).",
            hint="put the .bin written together with this .param next to it, or export the model again.",
        )
    return NcnnLayout(
        subject,
        param,
        bin_path,
        [spec for spec, _, _ in tensors["inputs"]],
        [spec for spec, _, _ in tensors["outputs"]],
        [port for _, port, _ in tensors["inputs"]],
        [port for _, port, _ in tensors["outputs"]],
        {spec.name: axis for side in tensors.values() for spec, _, axis in side},
        dict(io.get("metadata") or {}),
        "f16" if io.get("weights") == "f16" else "f32",
    )


def _check_weights_size(param: Path, bin_path: Path) -> None:
    """The .bin must hold exactly the bytes the .param's layers read: ncnn itself refuses a short
    one but silently ignores a longer one (another model's weights)."""
    import ncnn

    class Counting(ncnn.DataReaderFromEmpty):
        def __init__(self) -> None:
            super().__init__()
            self.total = 0

        def read(self, buf: Any, size: int) -> int:
            self.total += size
            return int(super().read(buf, size))

    net = ncnn.Net()
    net.opt.num_threads = 1
    net.load_param(str(param))
    reader = Counting()
    net.load_model(reader)
    net.clear()
    size = bin_path.stat().st_size
    if reader.total != size:
        raise ModelError(
            f"model '{param.name}' | its weights file {bin_path.name} holds {size} bytes, the layers in the "
            f".param read {reader.total}: the .bin belongs to another model.",
            hint="put the .bin written together with this .param next to it (deploykit export ncnn writes both).",
        )
