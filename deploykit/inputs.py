"""Feeds for runs, benches and parity checks: seeded random data or arrays from files.

Every backend in a comparison must see exactly the same arrays, so inputs are
made once here and passed to each session.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from deploykit.errors import InputError, UsageError
from deploykit.tensors import TensorSpec, parse_shape


def concrete_shape(
    spec: TensorSpec, dims: Mapping[str, int] | None = None, shape: Sequence[int] | None = None
) -> tuple[int, ...]:
    """A fixed shape for ``spec``: ``shape`` if given, else symbolic dims from ``dims`` (default 1)."""
    if shape is not None:
        return tuple(int(d) for d in shape)
    if spec.shape is None:
        raise InputError(
            f"input '{spec.name}' | has unknown rank, so no random data can be made for it.",
            hint=f"give its shape: --shape {spec.name}=1x3x224x224 (or shapes={{...}}).",
        )
    dims = dims or {}
    return tuple(d if isinstance(d, int) else int(dims.get(d, 1)) if isinstance(d, str) else 1 for d in spec.shape)


def random_array(spec: TensorSpec, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Data that suits the dtype: floats in [-1, 1), small non-negative ints, random bools."""
    kind = spec.dtype.kind
    if kind == "f":
        return rng.uniform(-1.0, 1.0, size=shape).astype(spec.dtype)
    if kind in "iu":
        return rng.integers(0, 8, size=shape).astype(spec.dtype)
    if kind == "b":
        return rng.integers(0, 2, size=shape).astype(bool)
    raise InputError(
        f"input '{spec.name}' | dtype {spec.dtype.name} has no random generator.",
        hint="pass real data from a .npy or .npz file.",
    )


def make_inputs(
    specs: Mapping[str, TensorSpec] | Sequence[TensorSpec],
    *,
    seed: int = 0,
    dims: Mapping[str, int] | None = None,
    shapes: Mapping[str, Sequence[int]] | None = None,
) -> dict[str, np.ndarray]:
    """Seeded random feeds for every input; the same seed gives the same arrays."""
    items = list(specs.values()) if isinstance(specs, Mapping) else list(specs)
    shapes = shapes or {}
    unknown = set(shapes) - {s.name for s in items}
    if unknown:
        raise UsageError(
            f"shape given for {', '.join(sorted(unknown))} | not an input of the model; inputs "
            f"are {', '.join(s.name for s in items)}.",
            hint="check the input names with 'deploykit inspect MODEL'.",
        )
    rng = np.random.default_rng(seed)
    return {s.name: random_array(s, concrete_shape(s, dims, shapes.get(s.name)), rng) for s in items}


def load_arrays(path: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """Arrays from an ``.npz`` (name → array) file.

    Raises:
        UsageError: the file is missing or not an npz archive.
    """
    file = Path(path)
    if not file.is_file():
        raise UsageError(
            f"inputs file '{file}' | does not exist.",
            hint="pass an .npz file whose array names are the model's input names.",
        )
    try:
        with np.load(file, allow_pickle=False) as archive:
            if not hasattr(archive, "files"):
                raise ValueError("a single array, not an archive")
            return {name: archive[name] for name in archive.files}
    except Exception as exc:
        raise UsageError(
            f"inputs file '{file}' | cannot be read as .npz: {exc}.",
            hint="save inputs with np.savez(path, input_name=array, ...).",
        ) from exc


def save_arrays(path: str | os.PathLike[str], arrays: Mapping[str, np.ndarray]) -> None:
    """Write arrays by name to an ``.npz`` file (the inverse of ``load_arrays``)."""
    named: dict[str, Any] = dict(arrays)
    np.savez(path, **named)


def parse_input_options(
    values: Sequence[str], specs: Mapping[str, TensorSpec], *, seed: int = 0
) -> dict[str, np.ndarray]:
    """Feeds from CLI ``--input`` values: ``name=random``, ``name=random:1x3x8x8``,
    ``name=file.npy``, or ``file.npz`` for several inputs at once. Inputs not named
    get seeded random data."""
    feeds: dict[str, np.ndarray] = {}
    shapes: dict[str, tuple[int, ...]] = {}
    for value in values:
        name, sep, source = value.partition("=")
        if not sep:
            feeds.update(load_arrays(value))
            continue
        if name not in specs:
            raise UsageError(
                f"--input '{value}' | '{name}' is not an input of the model; inputs are {', '.join(specs)}.",
                hint="check the input names with 'deploykit inspect MODEL'.",
            )
        if source == "random" or source.startswith("random:"):
            if source.startswith("random:"):
                shapes[name] = parse_shape(source.partition(":")[2])
            continue
        feeds[name] = _load_npy(name, source)
    missing = {n: s for n, s in specs.items() if n not in feeds}
    feeds.update(make_inputs(missing, seed=seed, shapes=shapes))
    return feeds


def _load_npy(name: str, source: str) -> Any:
    path = Path(source)
    if path.suffix != ".npy" or not path.is_file():
        raise UsageError(
            f"--input '{name}={source}' | expected 'random', 'random:SHAPE' or an existing .npy file.",
            hint="save an array with np.save('x.npy', array).",
        )
    try:
        return np.load(path, allow_pickle=False)
    except Exception as exc:
        raise UsageError(
            f"--input '{name}={source}' | cannot read the .npy file: {exc}.",
            hint="save an array with np.save('x.npy', array).",
        ) from exc
