"""How a LiteRT model's signature maps to the ONNX graph it came from: names, layout, dtypes.

onnx2tf keeps the ONNX names in the ``.tflite`` signature but turns channel-first tensors
channel-last (NCHW → NHWC, NCW → NWC): each port records the permutation from the ONNX axes to the
LiteRT ones, so a session feeds ``array.transpose(permutation)`` and hands outputs back in the ONNX
layout. The ``.json`` that ``deploykit export litert`` writes beside a ``.tflite`` holds the same map,
so a native file opens with its ONNX interface; without one it opens with its own signature.

This module reads signatures and JSON; it never runs a model.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from deploykit.backends.converted import interface_file
from deploykit.errors import ModelError, UnsupportedModelError
from deploykit.io import file_sha256
from deploykit.tensors import TensorSpec

IO_FORMAT = "deploykit-litert-io"


@dataclass(frozen=True)
class Port:
    """One signature input or output: its key in the ``.tflite``, its dtype and shape there, the
    permutation that takes an ONNX-layout array to the LiteRT layout (None: the same layout), and
    whether its first axis is the ONNX graph's dynamic batch (converted at the size in ``shape``)."""

    key: str
    dtype: str
    shape: tuple[int, ...]
    permutation: tuple[int, ...] | None = None
    batched: bool = False

    def to_litert(self, array: np.ndarray) -> np.ndarray:
        if self.permutation is not None:
            array = array.transpose(self.permutation)
        return np.ascontiguousarray(array, dtype=np.dtype(self.dtype))

    def from_litert(self, array: np.ndarray, dtype: np.dtype[Any]) -> np.ndarray:
        if self.permutation is not None:
            array = array.transpose(np.argsort(self.permutation))
        return np.ascontiguousarray(array, dtype=dtype)


@dataclass(frozen=True)
class LiteRtLayout:
    """A ``.tflite`` and the interface a session offers for it."""

    tflite: Path
    signature: str
    specs_in: list[TensorSpec]
    specs_out: list[TensorSpec]
    inputs: list[Port]
    outputs: list[Port]
    metadata: dict[str, str] = field(default_factory=dict)

    def io_document(self, source: Path | None, weights: str) -> dict[str, Any]:
        """The ``.json`` written beside an exported ``.tflite``: the name and layout map and the metadata."""

        def tensors(specs: list[TensorSpec], ports: list[Port]) -> list[dict[str, Any]]:
            return [
                {
                    **spec.to_dict(),
                    "key": port.key,
                    "litert_dtype": port.dtype,
                    "litert_shape": list(port.shape),
                    "permutation": None if port.permutation is None else list(port.permutation),
                    "batched": port.batched,
                }
                for spec, port in zip(specs, ports, strict=True)
            ]

        return {
            "format": IO_FORMAT,
            "version": 1,
            "source": None if source is None else source.name,
            "source_sha256": None if source is None else file_sha256(source),
            "tflite_sha256": file_sha256(self.tflite),
            "weights": weights,
            "signature": self.signature,
            "inputs": tensors(self.specs_in, self.inputs),
            "outputs": tensors(self.specs_out, self.outputs),
            "metadata": self.metadata,
        }


def signature_ports(details: Mapping[str, Mapping[str, Any]]) -> dict[str, Port]:
    """Signature key → ``Port`` in the LiteRT layout, from a signature runner's input or output details."""
    ports = {}
    for key, detail in details.items():
        shape = detail.get("shape_signature")
        if shape is None or len(shape) == 0:
            shape = detail["shape"]
        ports[key] = Port(key, np.dtype(detail["dtype"]).name, tuple(int(d) for d in shape))
    return ports


def own_specs(ports: Sequence[Port]) -> list[TensorSpec]:
    """The signature's own interface (a ``.tflite`` with no ``.json``): its keys, dtypes and shapes."""
    return [TensorSpec(p.key, np.dtype(p.dtype), tuple(None if d < 0 else d for d in p.shape)) for p in ports]


def channel_last(rank: int) -> tuple[int, ...]:
    """(0, 2, 3, 1) for rank 4: NCHW → NHWC, and alike for ranks 3 and 5."""
    return (0, *range(2, rank), 1)


def permutation_for(onnx_shape: Sequence[int | str | None], litert_shape: Sequence[int]) -> tuple[int, ...] | None:
    """The permutation taking the ONNX layout to the LiteRT one, judged by shape: the channel-last
    one where the shapes say so (onnx2tf's own choice for rank 3 to 5, preferred when both fit),
    else the same layout; None also when the ranks differ (the caller refuses that)."""
    rank = len(onnx_shape)
    if rank != len(litert_shape):
        return None

    def fits(order: Sequence[int]) -> bool:
        for axis, size in zip(order, litert_shape, strict=True):
            wanted = onnx_shape[axis]
            if isinstance(wanted, int) and wanted >= 0 and size >= 0 and wanted != size:
                return False
        return True

    if 3 <= rank <= 5 and fits(channel_last(rank)) and channel_last(rank) != tuple(range(rank)):
        return channel_last(rank)
    return tuple(range(rank)) if fits(range(rank)) else None


def _key_for(name: str, ports: Mapping[str, Port], order: int, keys: Sequence[str]) -> str | None:
    """The signature key of ONNX tensor ``name``: itself, or as converters spell names in a signature
    (characters other than letters, digits and ``_`` replaced), else the one at the same position."""
    if name in ports:
        return name
    spelled = re.sub(r"[^0-9A-Za-z_]", "_", name)
    for key in ports:
        if re.sub(r"[^0-9A-Za-z_]", "_", key) == spelled:
            return key
    return keys[order] if order < len(keys) else None


def match(
    subject: str, side: str, specs: Sequence[TensorSpec], ports: Mapping[str, Port]
) -> tuple[list[TensorSpec], list[Port]]:
    """Each ONNX tensor with its signature port, the permutation between them, and the spec a session
    offers: the ONNX name and dtype, with the converted file's fixed sizes in the ONNX layout.

    Raises:
        UnsupportedModelError: a tensor has no port, or a port's rank or sizes cannot be the tensor's.
    """
    if len(specs) != len(ports):
        raise UnsupportedModelError(
            f"backend 'litert' | {subject}: the ONNX graph has {len(specs)} {side}, the LiteRT signature "
            f"{len(ports)} ({', '.join(ports)}).",
            hint="convert the model again (deploykit export litert), or try another backend.",
        )
    keys = list(ports)
    matched_specs, matched_ports = [], []
    for order, spec in enumerate(specs):
        key = _key_for(spec.name, ports, order, keys)
        port = ports[key] if key is not None else None
        onnx_shape = spec.shape if spec.shape is not None else ()
        permutation = None if port is None else permutation_for(onnx_shape, port.shape)
        if port is None or permutation is None:
            found = "none" if port is None else f"'{port.key}' {list(port.shape)}"
            raise UnsupportedModelError(
                f"backend 'litert' | {subject}: {side[:-1]} '{spec.name}' {list(onnx_shape)} has no matching port in "
                f"the LiteRT signature (found {found}).",
                hint="convert the model again (deploykit export litert), or try another backend.",
            )
        back = np.argsort(permutation)
        shape: tuple[int | str | None, ...] = tuple(None if port.shape[a] < 0 else int(port.shape[a]) for a in back)
        first = onnx_shape[0] if onnx_shape else 0
        # a dynamic batch converted at a fixed size stays dynamic: other sizes run sample by sample
        batched = bool(onnx_shape) and not (isinstance(first, int) and first >= 0) and permutation[0] == 0
        if batched:
            shape = (first, *shape[1:])
        matched_specs.append(TensorSpec(spec.name, spec.dtype, shape))
        identity = permutation == tuple(range(len(permutation)))
        matched_ports.append(Port(port.key, port.dtype, port.shape, None if identity else permutation, batched))
    return matched_specs, matched_ports


def read_io(tflite: Path) -> dict[str, Any] | None:
    """The ``.json`` beside ``tflite`` written by ``deploykit export litert`` (None when there is none).

    Raises:
        ModelError: it is there but is not such a file, or it belongs to another ``.tflite``.
    """
    io_path = interface_file(tflite)
    if not io_path.is_file():
        return None
    try:
        io: dict[str, Any] = json.loads(io_path.read_text())
    except (OSError, ValueError) as exc:
        raise ModelError(
            f"model '{tflite.name}' | {io_path.name} beside it is not readable JSON ({exc}).",
            hint="remove it, or export the model again with deploykit export litert.",
        ) from exc
    if not isinstance(io, dict) or io.get("format") != IO_FORMAT:
        raise ModelError(
            f"model '{tflite.name}' | {io_path.name} beside it is not a deploykit LiteRT interface file "
            f"(format {io.get('format') if isinstance(io, dict) else None!r}, expected '{IO_FORMAT}').",
            hint="move that file away, or export the model again with deploykit export litert.",
        )
    if io.get("tflite_sha256") not in (None, file_sha256(tflite)):
        raise ModelError(
            f"model '{tflite.name}' | {io_path.name} beside it describes another .tflite (its SHA-256 differs).",
            hint="put the .json written with this .tflite next to it, or remove it to open the file's own signature.",
        )
    return io


def io_ports(io: Mapping[str, Any], side: str) -> tuple[list[TensorSpec], list[Port]]:
    """The specs and ports an interface file records for ``inputs`` or ``outputs``."""
    specs, ports = [], []
    for item in io[side]:
        specs.append(TensorSpec.from_dict(item))
        permutation = item.get("permutation")
        ports.append(
            Port(
                item["key"],
                item["litert_dtype"],
                tuple(item["litert_shape"]),
                None if permutation is None else tuple(permutation),
                bool(item.get("batched")),
            )
        )
    return specs, ports
