"""Typed backend options: each backend declares an ``OptionSpec`` per option in its own module.

``Backend.open`` validates every option against its spec before loading anything, so
``threads=abc``, ``threads=100000``, ``streams=-1`` or ``spinning=maybe`` are refused with
the accepted range instead of reaching (and hanging or crashing) a runtime.
``deploykit backends --options`` prints the same specs. Nothing here imports a runtime.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from deploykit.errors import UsageError

OptionValue = bool | int | float | str | os.PathLike[str]
"""What a backend option may be given as (checked and converted by its ``OptionSpec``)."""

# More threads than this multiple of the CPUs only adds contention (and 100,000 threads exhaust memory).
THREADS_PER_CPU_LIMIT = 4
_TRUE = ("true", "1", "yes", "on")
_FALSE = ("false", "0", "no", "off")


def cpu_count() -> int:
    """CPUs this process may run on (its affinity mask, else all of the machine's)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def thread_limit() -> int:
    return THREADS_PER_CPU_LIMIT * cpu_count()


@dataclass(frozen=True)
class OptionSpec:
    """One backend option: its type, accepted values, default and meaning.

    Attributes:
        doc: one line on what it does.
        type: ``int``, ``float``, ``bool``, ``str`` (``choices`` restrict it) or ``path``.
        default: the value used when the option is not given (``None``: the runtime's own).
        low, high: inclusive bounds for numbers.
        per_cpu: the upper bound is ``THREADS_PER_CPU_LIMIT`` × this machine's CPUs (thread counts).
        choices: accepted strings (case-insensitive) for a ``str`` option.
    """

    doc: str
    type: str = "str"
    default: Any = None
    low: float | None = None
    high: float | None = None
    per_cpu: bool = False
    choices: tuple[str, ...] = ()

    def upper(self) -> float | None:
        return thread_limit() if self.per_cpu else self.high

    def accepted(self) -> str:
        """The accepted values, in words (for tables and messages)."""
        if self.choices:
            return " | ".join(self.choices)
        if self.type == "bool":
            return "true | false"
        if self.type in ("int", "float"):
            low, high = self.low, self.upper()
            if low is not None and high is not None:
                text = f"{low:g} to {high:g}"
                return text + (f" ({THREADS_PER_CPU_LIMIT} × {cpu_count()} CPUs)" if self.per_cpu else "")
            if low is not None:
                return f"≥ {low:g}"
            if high is not None:
                return f"≤ {high:g}"
        return "a path" if self.type == "path" else "any text"

    def validate(self, backend: str, name: str, value: Any) -> Any:
        """``value`` converted to the option's type, or ``UsageError`` naming what is accepted."""
        subject = f"backend '{backend}' | option {name}={value!r}"
        expected = f"expected {self._kind()} ({self.accepted()})"
        hint = f"'deploykit backends --options' lists {backend}'s options; {name}: {self.doc}."
        if self.type == "bool":
            if isinstance(value, bool):
                return value
            text = str(value).strip().lower()
            if text in _TRUE or text in _FALSE:
                return text in _TRUE
            raise UsageError(f"{subject} is not true or false.", hint=hint)
        if self.type in ("int", "float"):
            number = self._number(value)
            if number is None:
                raise UsageError(f"{subject} is not {self._kind()}; {expected}.", hint=hint)
            high = self.upper()
            if (self.low is not None and number < self.low) or (high is not None and number > high):
                raise UsageError(f"{subject} is out of range; {expected}.", hint=hint)
            return number
        text = str(value)
        if self.choices:
            lowered = text.strip().lower()
            if lowered not in self.choices:
                raise UsageError(f"{subject} is not one of {', '.join(self.choices)}.", hint=hint)
            return lowered
        if not text.strip():
            raise UsageError(f"{subject} is empty; {expected}.", hint=hint)
        return text

    def _kind(self) -> str:
        return {"int": "an integer", "float": "a number", "bool": "true or false", "path": "a path"}.get(
            self.type, "a value"
        )

    def _number(self, value: Any) -> int | float | None:
        if isinstance(value, bool):
            return None
        if isinstance(value, str):
            try:
                value = float(value.strip()) if self.type == "float" else int(value.strip())
            except ValueError:
                return None
        if not isinstance(value, int | float) or not math.isfinite(value):
            return None
        if self.type == "int":
            if float(value) != int(value):
                return None
            return int(value)
        return float(value)

    def to_dict(self) -> dict[str, Any]:
        return {"doc": self.doc, "type": self.type, "default": self.default, "accepted": self.accepted()}


def as_spec(value: OptionSpec | str) -> OptionSpec:
    """Plug-ins may still describe an option by a plain string: it then takes any value."""
    return value if isinstance(value, OptionSpec) else OptionSpec(doc=value, type="any")


def validate_options(backend: str, specs: Mapping[str, OptionSpec | str], options: Mapping[str, Any]) -> dict[str, Any]:
    """Every option checked against its spec and converted to its type (unknown names refused).

    Raises:
        UsageError: an unknown option, or a value of the wrong type or out of range.
    """
    unknown = sorted(set(options) - set(specs))
    if unknown:
        known = ", ".join(sorted(specs)) or "none"
        raise UsageError(
            f"backend '{backend}' | unknown option(s) {', '.join(unknown)}; it takes: {known}.",
            hint="'deploykit backends --options' lists each backend's options.",
        )
    checked: dict[str, Any] = {}
    for name, value in options.items():
        spec = as_spec(specs[name])
        checked[name] = value if spec.type == "any" else spec.validate(backend, name, value)
    return checked
