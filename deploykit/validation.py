"""Range checks for numbers a user passes (thresholds, tolerances, counts, seeds), done up front.

One helper so that every command and API refuses ``--iou 2``, ``--atol nan`` or
``--top-k -3`` before any work, with the same message shape. Nothing here imports a runtime.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from deploykit.errors import UsageError

MAX_SEED = 2**32 - 1


def _number_text(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def _interval(low: float | None, high: float | None, low_open: bool, high_open: bool) -> str:
    """``in [0, 1]``, ``≥ 1``, ``< 5`` ... for messages."""
    if low is not None and high is not None:
        left, right = "(" if low_open else "[", ")" if high_open else "]"
        return f"in {left}{_number_text(low)}, {_number_text(high)}{right}"
    if low is not None:
        return f"{'>' if low_open else '≥'} {_number_text(low)}"
    if high is not None:
        return f"{'<' if high_open else '≤'} {_number_text(high)}"
    return ""


def check_number(
    name: str,
    value: Any,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
    integer: bool = False,
    hint: str | None = None,
) -> None:
    """Refuse a value outside ``[low, high]`` (open ends as asked), NaN, infinity, or a non-integer.

    Args:
        name: how the user wrote it, e.g. ``--iou`` or ``iou``.
        value: the value to check; ``None`` is always accepted (an unset option).
        low, high: bounds; ``None`` means unbounded on that side.
        low_open, high_open: exclude the bound itself.
        integer: the value must be an integer.
        hint: how to fix it (default: names the accepted range).

    Raises:
        UsageError: ``name 'value' | expected ...``.
    """
    if value is None:
        return
    interval = _interval(low, high, low_open, high_open)
    kind = "an integer" if integer else "a finite number"
    expected = f"expected {kind} {interval}".rstrip()
    bad = isinstance(value, bool) or not isinstance(value, int | float)
    if not bad:
        number = float(value)
        bad = (
            not math.isfinite(number)
            or (integer and not number.is_integer())
            or (low is not None and (number < low or (low_open and number == low)))
            or (high is not None and (number > high or (high_open and number == high)))
        )
    if bad:
        raise UsageError(
            f"{name} '{value}' | {expected}.", hint=hint or f"pass {name} {interval or 'as a finite number'}."
        )


def check_tolerances(*, atol: float | None, rtol: float | None) -> None:
    """``atol``/``rtol`` are finite and not negative (``None``: the default for the precision)."""
    for name, value in (("atol", atol), ("rtol", rtol)):
        check_number(
            f"--{name}",
            value,
            low=0.0,
            hint=f"pass a small non-negative tolerance such as --{name} 1e-4, or leave it out for the default.",
        )


def check_seed(seed: int | None) -> None:
    """Seeds are what NumPy accepts: integers from 0 to 2³²−1."""
    check_number("--seed", seed, low=0, high=MAX_SEED, integer=True, hint="pass --seed 0 or another positive integer.")


def known_fields(cls: type, data: Mapping[str, Any]) -> dict[str, Any]:
    """``data`` restricted to ``cls``'s fields; an unknown key is a usage error, not silently dropped."""
    names = {f.name for f in fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise UsageError(
            f"{cls.__name__} | has no setting '{unknown[0]}'.", hint=f"the settings are: {', '.join(sorted(names))}."
        )
    return dict(data)
