"""Tensor descriptions shared by every backend: ``TensorSpec`` and dtype helpers.

A graph input or output is a tensor, a sequence of tensors, or an optional (of a tensor or of a
sequence): ``TensorSpec.kind`` says which, and ``dtype``/``shape`` always describe the tensors
inside. This module knows numpy and ONNX type numbers; it must not import a runtime.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

Dim = int | str | None
"""One dimension: a fixed size, a symbolic name (``"batch"``) or ``None`` when unnamed."""

TENSOR, SEQUENCE, OPTIONAL, OPTIONAL_SEQUENCE = "tensor", "sequence", "optional", "optional_sequence"
KINDS = (TENSOR, SEQUENCE, OPTIONAL, OPTIONAL_SEQUENCE)
"""What a graph value is: a tensor (an ``np.ndarray``), a sequence (a ``list`` of arrays), an
optional tensor (an array or ``None``), an optional sequence (a list or ``None``)."""


@dataclass(frozen=True)
class TensorSpec:
    """Name, element type and shape of one model input or output.

    Attributes:
        name: the tensor's name in the graph.
        dtype: numpy dtype of the elements.
        shape: one entry per axis: an ``int`` for a fixed size, a ``str`` for a
            symbolic dimension (kept as the graph names it), ``None`` for an
            unnamed dynamic one. ``None`` as a whole means the rank is unknown.
        kind: ``tensor``, ``sequence``, ``optional`` or ``optional_sequence`` (see ``KINDS``);
            for the last three, ``dtype`` and ``shape`` describe each tensor inside.
    """

    name: str
    dtype: np.dtype[Any]
    shape: tuple[Dim, ...] | None
    kind: str = TENSOR

    @property
    def is_sequence(self) -> bool:
        """True when the value is a list of tensors (or, for an optional, may be)."""
        return self.kind in (SEQUENCE, OPTIONAL_SEQUENCE)

    @property
    def is_optional(self) -> bool:
        """True when the value may be ``None``."""
        return self.kind in (OPTIONAL, OPTIONAL_SEQUENCE)

    @property
    def is_static(self) -> bool:
        """True when every dimension is a fixed size."""
        return self.shape is not None and all(isinstance(d, int) for d in self.shape)

    @property
    def dynamic_axes(self) -> dict[int, str | None]:
        """Axis index → symbolic name (or None) for every dimension that is not fixed."""
        if self.shape is None:
            return {}
        return {i: d for i, d in enumerate(self.shape) if not isinstance(d, int)}

    def shape_text(self) -> str:
        """The shape as users read it: ``(batch, 3, 224, 224)``; ``?`` for unnamed dims."""
        if self.shape is None:
            return "(unknown rank)"
        parts = ["?" if d is None else str(d) for d in self.shape]
        return "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"

    def type_text(self) -> str:
        """Element type and shape as users read them: ``float32(1, 3)``, ``sequence<int64(?,)>``."""
        text = f"{self.dtype.name}{self.shape_text()}"
        if self.is_sequence:
            text = f"sequence<{text}>"
        return f"optional<{text}>" if self.is_optional else text

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "name": self.name,
            "dtype": self.dtype.name,
            "shape": None if self.shape is None else list(self.shape),
        }
        if self.kind != TENSOR:  # a tensor's dict stays as it always was
            data["kind"] = self.kind
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TensorSpec:
        """The spec ``to_dict`` wrote; ONNX's extra element types (bfloat16 ...) through ml_dtypes."""
        try:
            dtype = np.dtype(data["dtype"])
        except TypeError:
            import ml_dtypes

            dtype = np.dtype(getattr(ml_dtypes, data["dtype"]))
        shape = data.get("shape")
        return cls(data["name"], dtype, None if shape is None else tuple(shape), data.get("kind", TENSOR))

    def __str__(self) -> str:
        return f"{self.name}: {self.type_text()}"


def onnx_elem_to_numpy(elem_type: int, subject: str = "tensor type") -> np.dtype[Any]:
    """numpy dtype for an ONNX ``TensorProto`` element type number (``subject`` names the tensor in errors).

    Raises:
        InvalidModelError: the number is not a type the installed onnx knows.
    """
    import onnx
    from onnx import TensorProto, helper

    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))
    except (KeyError, ValueError, TypeError) as exc:
        from deploykit.errors import InvalidModelError

        codes = sorted(TensorProto.DataType.values())
        raise InvalidModelError(
            f"{subject} | element type code {elem_type} is not an ONNX tensor type; onnx {onnx.__version__} knows "
            f"codes {codes[1]} to {codes[-1]} (1 FLOAT, 7 INT64, 9 BOOL, 10 FLOAT16 ...).",
            hint="the file was written by a broken exporter or edited by hand; export it again.",
        ) from exc


def spec_from_value_info(value_info: Any) -> TensorSpec:
    """Build a ``TensorSpec`` from an ONNX ``ValueInfoProto`` (a graph input or output).

    Raises:
        UnsupportedModelError: the value is a map, a sparse tensor, a nested sequence or has no
            element type: nothing deploykit can feed or return.
    """
    type_proto = value_info.type
    containers: list[str] = []
    while type_proto.WhichOneof("value") in ("sequence_type", "optional_type") and len(containers) < 2:
        which = type_proto.WhichOneof("value")
        containers.append(SEQUENCE if which == "sequence_type" else OPTIONAL)
        type_proto = getattr(type_proto, which).elem_type
    kind = {(): TENSOR, (SEQUENCE,): SEQUENCE, (OPTIONAL,): OPTIONAL, (OPTIONAL, SEQUENCE): OPTIONAL_SEQUENCE}.get(
        tuple(containers)
    )
    described = type_proto.WhichOneof("value")
    if kind is None or described != "tensor_type" or not type_proto.tensor_type.elem_type:
        from deploykit.errors import UnsupportedModelError

        what = "<".join([*containers, (described or "no type").replace("_type", "")]) + ">" * len(containers)
        raise UnsupportedModelError(
            f"graph value '{value_info.name}' | is a {what}; expected a tensor with an element type, a "
            "sequence of tensors, or an optional tensor or sequence.",
            hint="deploykit feeds and returns tensors, lists of tensors and None; export the model "
            "so its inputs and outputs are of those types.",
        )
    tensor_type = type_proto.tensor_type
    dtype = onnx_elem_to_numpy(tensor_type.elem_type, f"graph value '{value_info.name}'")
    if not tensor_type.HasField("shape"):
        return TensorSpec(value_info.name, dtype, None, kind)
    dims: list[Dim] = []
    for dim in tensor_type.shape.dim:
        if dim.HasField("dim_value") and dim.dim_value >= 0:  # 0 is a real size (an empty axis), not unknown
            dims.append(int(dim.dim_value))
        elif dim.HasField("dim_param") and dim.dim_param:
            dims.append(dim.dim_param)
        else:
            dims.append(None)
    return TensorSpec(value_info.name, dtype, tuple(dims), kind)


def parse_shape(text: str) -> tuple[int, ...]:
    """Parse ``1x3x224x224`` (or ``1,3,224,224``) into a tuple of positive ints.

    Raises:
        UsageError: when the text is not such a list.
    """
    from deploykit.errors import UsageError

    cleaned = text.strip().strip("()[]").replace(",", "x").replace(" ", "")
    parts = cleaned.split("x")
    try:  # every part a size: '1x4x' and '1xx4' are typos, not shapes
        dims = tuple(int(part) for part in parts) if all(parts) else ()
    except ValueError:
        dims = ()
    if not dims or any(d <= 0 for d in dims):
        raise UsageError(
            f"shape '{text}' | not a list of positive sizes.",
            hint="write a shape as sizes joined by 'x', e.g. 1x3x224x224.",
        )
    return dims


def normalize_precision(precision: str | None) -> str:
    """``FP32``/``float32``/``f32`` → ``f32``; likewise f16, bf16, int8, f64 (others lower-cased)."""
    text = (precision or "f32").strip().lower()
    aliases = {
        "fp32": "f32",
        "float32": "f32",
        "float": "f32",
        "fp16": "f16",
        "float16": "f16",
        "half": "f16",
        "bfloat16": "bf16",
        "fp64": "f64",
        "float64": "f64",
        "double": "f64",
        "i8": "int8",
        "u8": "int8",
        "uint8": "int8",
        "qdq": "int8",
    }
    return aliases.get(text, text)
