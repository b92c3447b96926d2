"""A documented call keeps working for one minor release after it changes, with a
``DeprecationWarning`` that names its replacement.

The public functions of deploykit 0.1 took their settings as keywords (``benchmark(model,
backends=[...], iterations=200)``); they now take settings values (``benchmark(model,
BenchPlan(...))``). ``fold_keywords`` folds the old keywords into the values a function now
takes, and says once, in one warning, what to write instead. An unknown keyword is the
``TypeError`` Python would raise.
"""

from __future__ import annotations

import abc
import contextlib
import os
import sys
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import FrameType
from typing import Any


@dataclass(frozen=True)
class MovedKeywords:
    """0.1 keywords that now live in the settings value passed as ``parameter``.

    Attributes:
        parameter: the function's parameter that takes the value (``export``, ``plan``, ``settings``).
        keywords: the old keywords that are fields of that value (or of its ``nested`` field).
        nested: the field of the value that holds them, when they moved one level down
            (``thresholds`` for ``atol``/``rtol`` in ``VerifySettings``).
        convert: per keyword, what turns the old value into the field's type (lists into tuples ...).
    """

    parameter: str
    keywords: tuple[str, ...]
    nested: str | None = None
    convert: Mapping[str, Callable[[Any], Any]] = field(default_factory=dict)

    def apply(self, value: Any, given: Mapping[str, Any]) -> Any:
        """``value`` with the ``given`` old keywords set on it (checked as the value's constructor checks)."""
        moved = {name: self.convert.get(name, _same)(item) for name, item in given.items()}
        if self.nested is None:
            return replace(value, **moved)
        return replace(value, **{self.nested: replace(getattr(value, self.nested), **moved)})

    def replacement(self, value: Any, names: list[str]) -> str:
        """How the call is written now, e.g. ``checks=VerifySettings(thresholds=ThresholdOverrides(atol=...))``."""
        inner = ", ".join(f"{name}=..." for name in names)
        if self.nested is not None:
            inner = f"{self.nested}={type(getattr(value, self.nested)).__name__}({inner})"
        return f"{self.parameter}={type(value).__name__}({inner})"


def _callers_level() -> int:
    """The ``stacklevel`` of the first frame outside deploykit (and its decorators' contextlib), so
    that the warning names the line of the user's code that made the old call."""
    frame: FrameType | None = sys._getframe(1)
    level = 1
    while frame is not None and frame.f_code.co_filename.startswith(_SKIPPED):
        frame, level = frame.f_back, level + 1
    return level


# a class statement runs ABCMeta.__new__ (abc's frozen code) before a plug-in base's __init_subclass__
_SKIPPED = (str(Path(__file__).parent) + os.sep, contextlib.__file__, abc.ABCMeta.__new__.__code__.co_filename)


def _same(value: Any) -> Any:
    return value


def fold_keywords(
    function: str,
    legacy: Mapping[str, Any],
    values: Mapping[str, Any],
    moves: tuple[MovedKeywords, ...],
    renamed: str = "",
) -> dict[str, Any]:
    """``values`` (parameter → the settings value given or its default) with 0.1's keywords in
    ``legacy`` folded in, warned once as deprecated with the replacement; unknown keywords are a TypeError.
    ``renamed``: the function's new name, when the old name itself is deprecated (warned even without
    old keywords)."""
    known = {name for move in moves for name in move.keywords}
    unknown = [name for name in legacy if name not in known]
    if unknown:
        raise TypeError(f"{function}() got an unexpected keyword argument '{unknown[0]}'")
    if not legacy and not renamed:
        return dict(values)
    folded, replacements = dict(values), [f"call {renamed}"] if renamed else []
    for move in moves:
        given = {name: item for name, item in legacy.items() if name in move.keywords}
        if given:
            replacements.append(move.replacement(folded[move.parameter], list(given)))
            folded[move.parameter] = move.apply(folded[move.parameter], given)
    steps = " and ".join(replacements) if renamed else f"pass {' and '.join(replacements)}"
    warnings.warn(
        f"{function}({', '.join(f'{name}=' for name in legacy)}) is deprecated and goes in the next release; {steps}.",
        DeprecationWarning,
        stacklevel=_callers_level(),
    )
    return folded


def warn_deprecated(old: str, replacement: str) -> None:
    """Warn once that ``old`` is deprecated and goes in the next release, naming ``replacement``, at the
    line of the user's code (a class statement, for a class that still uses old names)."""
    warnings.warn(
        f"{old} is deprecated and goes in the next release; {replacement}.",
        DeprecationWarning,
        stacklevel=_callers_level(),
    )
