"""What crosses between the caller and a runtime, apart from feeds (``validation``): outputs made
the caller's own with the runtime's exact shape and dtype, the kinds of values a backend runs
(tensors, sequences, optionals) and the refusal of the others by name, and a reason as the end of a
message. ``Session`` and ``Backend`` call these; nothing here imports a
runtime.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from deploykit.errors import UnsupportedModelError
from deploykit.tensors import OPTIONAL, OPTIONAL_SEQUENCE, SEQUENCE, TENSOR, TensorSpec

_KIND_WORDS = {
    TENSOR: "tensor",
    SEQUENCE: "sequence",
    OPTIONAL: "optional tensor",
    OPTIONAL_SEQUENCE: "optional sequence",
}


def owned_output(spec: TensorSpec, value: Any, refuse: Callable[[TensorSpec, str], Exception]) -> Any:
    """An output as the runtime made it, as the caller's own: same shape (0-d stays 0-d) and dtype,
    C-contiguous; a list of such arrays for a sequence, None for an empty optional. A value of the
    wrong kind (OpenCV's None for an empty tensor) raises ``refuse(spec, problem)``."""
    if value is None and spec.is_optional:
        return None
    if spec.is_sequence:
        if not isinstance(value, list | tuple):
            raise refuse(spec, f"got {_described(value)}, expected a list")
        return [owned_output(replace(spec, kind=TENSOR), item, refuse) for item in value]
    if value is None or isinstance(value, list | tuple):
        raise refuse(spec, f"got {_described(value)}, expected an array")
    return np.asarray(value, order="C")  # not ascontiguousarray: it makes a 0-d array 1-d


def kind_refusal(
    subject: str,
    backend: str,
    model_path: Path,
    inputs: Sequence[TensorSpec],
    outputs: Sequence[TensorSpec],
    kinds: frozenset[str],
    running: Callable[[str], list[str]],
) -> UnsupportedModelError | None:
    """The error for the first input or output whose kind is not in ``kinds``, naming the backends
    that run it (``running(kind)``, asked only then), or None when every value is of a kind the backend runs."""
    for direction, specs in (("input", inputs), ("output", outputs)):
        for spec in specs:
            if spec.kind in kinds:
                continue
            others = running(spec.kind)
            who = f"{' and '.join(others)} {'does' if len(others) == 1 else 'do'}." if others else "no backend does."
            return UnsupportedModelError(
                f"{subject} | cannot run '{model_path.name}': {backend} does not run {_KIND_WORDS[spec.kind]} "
                f"{direction}s ({direction} '{spec.name}' is {spec.type_text()}); {who}",
                hint=f"load it with backend '{others[0]}'."
                if others
                else "export the model with tensor inputs and outputs.",
            )
    return None


def sentence(reason: str) -> str:
    """A reason as the end of a message: with its full stop."""
    reason = reason.rstrip()
    return reason if reason.endswith((".", "!", "?")) else reason + "."


def _described(value: Any) -> str:
    if value is None:
        return "None"
    if isinstance(value, list | tuple):
        return f"a {type(value).__name__} of {len(value)}"
    return type(value).__name__
