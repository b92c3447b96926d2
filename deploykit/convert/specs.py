"""Input specifications for converters: ``name:1x3x224x224[:dtype[:low..high]]`` and dynamic axes.

Parsing only; nothing here imports torch or a runtime.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from deploykit.errors import UsageError
from deploykit.tensors import parse_shape

_DTYPES = {
    "float32": np.float32,
    "float": np.float32,
    "f32": np.float32,
    "float16": np.float16,
    "half": np.float16,
    "f16": np.float16,
    "float64": np.float64,
    "double": np.float64,
    "int64": np.int64,
    "long": np.int64,
    "int32": np.int32,
    "int": np.int32,
    "uint8": np.uint8,
    "int8": np.int8,
    "bool": np.bool_,
}


@dataclass(frozen=True)
class InputSpec:
    """One model input for export: name, example shape, dtype and, for integers, a value range.

    ``low``/``high`` bound random integer data (``high`` exclusive), e.g. a vocabulary size.
    """

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype[Any] = field(default_factory=lambda: np.dtype(np.float32))
    low: int = 0
    high: int = 10

    def example(self, rng: np.random.Generator, shape: Sequence[int] | None = None) -> np.ndarray:
        size = tuple(shape) if shape is not None else self.shape
        if self.dtype.kind == "f":
            return rng.standard_normal(size).astype(self.dtype)
        if self.dtype.kind == "b":
            return rng.integers(0, 2, size).astype(bool)
        return rng.integers(self.low, self.high, size).astype(self.dtype)


def parse_input_spec(text: str) -> InputSpec:
    """``images:1x3x224x224``, ``ids:1x16:int64`` or ``ids:1x16:int64:0..30000``."""
    parts = text.split(":")
    if len(parts) < 2 or not parts[0]:
        raise UsageError(
            f"input spec '{text}' | expected NAME:SHAPE[:DTYPE[:LOW..HIGH]].",
            hint="for example --input images:1x3x224x224 or --input ids:1x16:int64:0..30000.",
        )
    name, shape = parts[0], parse_shape(parts[1])
    dtype: np.dtype[Any] = np.dtype(np.float32)
    if len(parts) >= 3 and parts[2]:
        key = parts[2].lower()
        if key not in _DTYPES:
            raise UsageError(
                f"input spec '{text}' | dtype '{parts[2]}' is not one of {', '.join(sorted(_DTYPES))}.",
                hint="most image models take float32; token ids take int64.",
            )
        dtype = np.dtype(_DTYPES[key])
    low, high = 0, 10
    if len(parts) >= 4:
        lo, sep, hi = parts[3].partition("..")
        try:
            low, high = int(lo), int(hi)
        except ValueError:
            sep = ""
        if not sep or high <= low:
            raise UsageError(
                f"input spec '{text}' | value range '{parts[3]}' is not LOW..HIGH with LOW < HIGH.",
                hint="give integer inputs a range such as 0..30000 (HIGH is exclusive).",
            )
    if len(parts) > 4:
        raise UsageError(
            f"input spec '{text}' | has {len(parts)} ':'-separated parts, at most 4 are allowed.",
            hint="write NAME:SHAPE[:DTYPE[:LOW..HIGH]].",
        )
    return InputSpec(name, shape, dtype, low, high)


def parse_dynamic(values: Iterable[str], inputs: Sequence[InputSpec]) -> dict[str, dict[int, str]]:
    """``images:0=batch`` (several allowed) → ``{"images": {0: "batch"}}``, checked against inputs."""
    by_name = {spec.name: spec for spec in inputs}
    dynamic: dict[str, dict[int, str]] = {}
    for value in values:
        name, sep, rest = value.partition(":")
        axis_text, eq, label = rest.partition("=")
        if not sep or not eq or not axis_text.strip().isdigit() or not label:
            raise UsageError(
                f"dynamic axis '{value}' | expected NAME:AXIS=LABEL.",
                hint="for example --dynamic images:0=batch --dynamic ids:1=sequence.",
            )
        check_dynamic_axis(name, int(axis_text), by_name)
        dynamic.setdefault(name, {})[int(axis_text)] = label
    return dynamic


def check_dynamic_axis(name: str, axis: int, inputs: Mapping[str, InputSpec]) -> None:
    if name not in inputs:
        raise UsageError(
            f"dynamic axis for '{name}' | not one of the inputs ({', '.join(inputs)}).",
            hint="name an input given with --input.",
        )
    rank = len(inputs[name].shape)
    if not 0 <= axis < rank:
        raise UsageError(
            f"dynamic axis {axis} of '{name}' | the input has rank {rank}.",
            hint=f"axes of '{name}' are 0..{rank - 1}.",
        )
