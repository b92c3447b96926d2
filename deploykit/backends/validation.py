"""Checking feeds against a model's inputs: names, dtypes (lossless casts only), ranks, fixed and
shared symbolic sizes; a sequence input takes a list of such arrays, an optional one also None.
``Session.run`` calls it once per call; the verification subsystem calls
it on user-given arrays before any backend runs. It must not import a runtime.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from deploykit.errors import InputError
from deploykit.tensors import TensorSpec


@dataclass(frozen=True)
class FastCheck:
    """One input's spec, pre-digested for ``Session._accept``."""

    name: str
    dtype: np.dtype[Any]
    rank: int
    static_shape: tuple[int, ...] | None
    fixed_axes: tuple[tuple[int, int], ...]
    symbolic_axes: tuple[tuple[int, str], ...]

    @classmethod
    def of(cls, spec: TensorSpec) -> FastCheck:
        shape = spec.shape
        if shape is None or spec.is_sequence:  # unknown rank, or a list: always take the full path
            return cls(spec.name, spec.dtype, -1, (-1,), (), ())
        static = tuple(d for d in shape if isinstance(d, int)) if spec.is_static else None
        return cls(
            spec.name,
            spec.dtype,
            len(shape),
            static,
            tuple((i, d) for i, d in enumerate(shape) if isinstance(d, int)),
            tuple((i, d) for i, d in enumerate(shape) if isinstance(d, str)),
        )


def validate_feeds(specs: Mapping[str, TensorSpec], feeds: Mapping[str, Any], *, cast: bool = False) -> dict[str, Any]:
    """Check feeds against input specs once and return them as arrays of the right dtype.

    Symbolic dimensions with the same name must get the same size in every tensor input. A
    sequence input becomes a list of arrays (each checked for dtype, rank and fixed sizes); an
    optional input may be None.

    Raises:
        InputError: naming the input, what was given and what was expected.
    """
    if not isinstance(feeds, Mapping):
        raise InputError(
            f"feeds | got {type(feeds).__name__}, expected a dict of input name → array.",
            hint="pass run({'input_name': array}) or call the session with arrays in input order.",
        )
    for name in feeds:
        if name not in specs:
            raise InputError(
                f"input '{name}' | is not an input of this model; its inputs are {', '.join(repr(n) for n in specs)}.",
                hint="check the spelling; 'deploykit inspect MODEL' lists the inputs.",
            )
    prepared: dict[str, Any] = {}
    symbols: dict[str, tuple[int, str]] = {}
    for name, spec in specs.items():
        if name not in feeds:
            raise InputError(
                f"input '{name}' | is missing; expected {spec.type_text()}.",
                hint=f"the model needs every input: {', '.join(repr(n) for n in specs)}"
                + ("; pass None for an empty optional." if spec.is_optional else "."),
            )
        value = feeds[name]
        if value is None and spec.is_optional:
            prepared[name] = None
        elif spec.is_sequence:
            prepared[name] = _sequence(name, value, spec, cast)
        else:
            prepared[name] = _tensor(name, value, spec, cast, symbols)
    return prepared


def _tensor(name: str, value: Any, spec: TensorSpec, cast: bool, symbols: dict[str, tuple[int, str]]) -> np.ndarray:
    if value is None:
        raise InputError(
            f"input '{name}' | got None, expected {spec.type_text()}.",
            hint="pass an array; None is only for optional inputs.",
        )
    array = value if isinstance(value, np.ndarray) else np.asarray(value)
    if array.dtype != spec.dtype:
        array = _cast(name, array, spec, cast)
    if spec.shape is not None:
        _check_shape(name, array.shape, spec, symbols)
    return array


def _sequence(name: str, value: Any, spec: TensorSpec, cast: bool) -> list[np.ndarray]:
    if not isinstance(value, list | tuple):
        got = (
            f"an array {value.dtype.name}{tuple(value.shape)}"
            if isinstance(value, np.ndarray)
            else type(value).__name__
        )
        raise InputError(
            f"input '{name}' | got {got}, expected {spec.type_text()}, a list of arrays.",
            hint="pass a list ([array, ...]), even for a single tensor; [] is an empty sequence.",
        )
    # each tensor of a sequence has its own sizes: symbolic dimensions are not shared among them
    return [_tensor(f"{name}[{index}]", item, spec, cast, {}) for index, item in enumerate(value)]


def _cast(name: str, array: np.ndarray, spec: TensorSpec, cast: bool) -> np.ndarray:
    if array.dtype == object or not (cast or np.can_cast(array.dtype, spec.dtype, casting="safe")):
        raise InputError(
            f"input '{name}' | got dtype {array.dtype.name}, expected {spec.dtype.name}; "
            "the cast would lose precision.",
            hint=f"convert first (array.astype(np.{spec.dtype.name})) or pass cast=True.",
        )
    try:
        return array.astype(spec.dtype)
    except (TypeError, ValueError) as exc:
        raise InputError(
            f"input '{name}' | cannot cast dtype {array.dtype.name} to {spec.dtype.name}: {exc}.",
            hint=f"pass a numeric array of dtype {spec.dtype.name}.",
        ) from exc


def _check_shape(name: str, shape: tuple[int, ...], spec: TensorSpec, symbols: dict[str, tuple[int, str]]) -> None:
    assert spec.shape is not None
    if len(shape) != len(spec.shape):
        raise InputError(
            f"input '{name}' | got rank {len(shape)} {tuple(shape)}, expected rank "
            f"{len(spec.shape)} {spec.shape_text()}.",
            hint="add or remove axes (e.g. np.expand_dims for a batch axis).",
        )
    for axis, (size, expected) in enumerate(zip(shape, spec.shape, strict=True)):
        if isinstance(expected, int):
            if size != expected:
                raise InputError(
                    f"input '{name}' | got shape {tuple(shape)}, expected {spec.shape_text()} "
                    f"(axis {axis} must be {expected}).",
                    hint="resize the input, or re-export the model with that axis dynamic.",
                )
        elif isinstance(expected, str):
            seen = symbols.get(expected)
            if seen is None:
                symbols[expected] = (size, name)
            elif seen[0] != size:
                raise InputError(
                    f"input '{name}' | axis {axis} ('{expected}') is {size}, but input "
                    f"'{seen[1]}' set '{expected}' to {seen[0]}.",
                    hint=f"dimension '{expected}' is shared: give every input the same size.",
                )
