"""Range checks for numbers a user passes (thresholds, tolerances, counts, seeds), done up front.

One helper so that every command and API refuses ``--iou 2``, ``--atol nan`` or
``--top-k -3`` before any work, with the same message shape. Nothing here imports a runtime.
"""

from __future__ import annotations

import math
import re
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
    expected = number_problem(value, low=low, high=high, low_open=low_open, high_open=high_open, integer=integer)
    if expected:
        interval = _interval(low, high, low_open, high_open)
        raise UsageError(
            f"{name} '{value}' | {expected}.", hint=hint or f"pass {name} {interval or 'as a finite number'}."
        )


def number_problem(
    value: Any,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
    integer: bool = False,
) -> str | None:
    """What is wrong with ``value`` as a number in the range (``expected an integer ≥ 0``), or None when nothing
    is: NaN, infinity, a bool, a non-integer where one is needed and a value outside the bounds are wrong."""
    interval = _interval(low, high, low_open, high_open)
    kind = "an integer" if integer else "a finite number"
    bad = isinstance(value, bool) or not isinstance(value, int | float)
    if not bad:
        number = float(value)
        bad = (
            not math.isfinite(number)
            or (integer and not number.is_integer())
            or (low is not None and (number < low or (low_open and number == low)))
            or (high is not None and (number > high or (high_open and number == high)))
        )
    return f"expected {kind} {interval}".rstrip() if bad else None


# One grammar for every duration a user types: a number and a unit; a bare number is seconds.
DURATION_UNITS_S = {"us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}
DURATION_EXAMPLES = "500us, 2ms, 1.5s, 90s, 2m or 1h"
# Longer than anything deploykit waits for, and short enough for every timer the standard library has
# (threading waits overflow near 2**63 ns); beyond it a typo is more likely than a plan.
MAX_DURATION_S = 7 * 24 * 3600.0
_DURATION = re.compile(r"\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*(us|µs|ms|s|min|m|h)?\s*")


def is_bare_number(text: str) -> bool:
    """A duration written without a unit (``5``, ``0.5``): seconds, except where an option kept an older meaning."""
    match = _DURATION.fullmatch(text)
    return match is not None and match.group(2) is None


def parse_duration(text: str, *, name: str = "duration", allow_zero: bool = False) -> float:
    """``500us``, ``2ms``, ``1.5s``, ``90s``, ``2m``, ``1h`` or a bare number of seconds → seconds.

    Args:
        text: what the user typed.
        name: how the user wrote the option, e.g. ``--timeout`` (for the message).
        allow_zero: accept 0 (``--max-queue-delay 0``: do not wait); otherwise a duration is positive.

    Raises:
        UsageError: not a number with one of the units, negative, zero (unless allowed), NaN, infinite
            or longer than a week.
    """
    match = _DURATION.fullmatch(text) if isinstance(text, str) else None
    seconds = float(match.group(1)) * DURATION_UNITS_S[match.group(2) or "s"] if match else None
    if seconds is None or (seconds == 0 and not allow_zero) or seconds > MAX_DURATION_S:
        least = "0 or more" if allow_zero else "more than 0"
        raise UsageError(
            f"{name} '{text}' | expected a duration {least} and at most a week: a number with a unit us, ms, "
            "s, m or h (a bare number is seconds).",
            hint=f"e.g. {DURATION_EXAMPLES}.",
        )
    return seconds


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
