"""Backend's attribute names before its concerns moved into values (``deploykit.backends.traits``), kept
working for one minor release: a plug-in class that still sets an old name (``independent_oracle = True``,
``load_hint = "..."``, ``pip_extra = "x"``) or defines an old hook (``oracle_blind_spot``, ``explain``)
has it folded into the value that replaces it when the class is made, with one ``DeprecationWarning``
naming the replacement; reading an old name from a backend warns and answers from the value. An
``_open(model, device, allow_fallback, options)`` is adapted to ``_open(model, request)`` the same way.

This module goes with the next minor release; nothing in deploykit uses the old names.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from deploykit.backends.traits import Conversion, LoadWording, OraclePolicy, RuntimePackage, SearchTraits, device_error
from deploykit.deprecation import warn_deprecated


@dataclass(frozen=True)
class _Moved:
    """An old name: the attribute whose value replaces it, and that value's field; ``hook`` for a method
    (its function, called on a fresh instance of the class, becomes the field)."""

    attribute: str
    field: str
    hook: bool = False


_VALUES: dict[str, type] = {
    "oracle": OraclePolicy,
    "search": SearchTraits,
    "wording": LoadWording,
    "runtime": RuntimePackage,
    "conversion": Conversion,
}

MOVED: dict[str, _Moved] = {
    "independent_oracle": _Moved("oracle", "independent"),
    "oracle_label": _Moved("oracle", "label", hook=True),
    "oracle_blind_spot": _Moved("oracle", "blind_spot", hook=True),
    "default_candidate": _Moved("search", "default_candidate"),
    "searched_when_ready": _Moved("search", "searched_when_ready"),
    "virtual_devices": _Moved("search", "virtual_devices"),
    "load_verb": _Moved("wording", "verb"),
    "load_hint": _Moved("wording", "hint"),
    "explain": _Moved("wording", "explain", hook=True),
    "subject": _Moved("wording", "subject", hook=True),
    "module": _Moved("runtime", "module"),
    "pip_extra": _Moved("runtime", "pip_extra"),
    "distributions": _Moved("runtime", "distributions"),
    "cpu_distribution": _Moved("runtime", "cpu_distribution"),
    "emulated_environment": _Moved("runtime", "emulated_environment", hook=True),
    "build_info": _Moved("runtime", "build_info", hook=True),
    "converted_weights": _Moved("conversion", "weights"),
    "converted_file": _Moved("conversion", "converted_file", hook=True),
    "carry": _Moved("conversion", "carry", hook=True),
    "recorded_interface": _Moved("conversion", "recorded_interface", hook=True),
    "onnx_unavailable_reason": _Moved("conversion", "onnx_unavailable_reason", hook=True),
}


MADE_FUNCTIONS: dict[str, Callable[..., Any]] = {}
"""Old method name → the module function that replaced it, taking the backend first; filled in by
``deploykit.backends.base`` (which imports this module, so this one cannot import it)."""


def _hook(cls: type, name: str) -> Callable[..., Any]:
    """The old method ``name`` of ``cls`` as a function of its arguments alone (backends are stateless)."""

    def call(*args: Any) -> Any:
        return getattr(cls(), name)(*args)

    return call


def _replacement(attribute: str, names: list[str]) -> str:
    inner = ", ".join(f"{MOVED[name].field}=..." for name in names)
    return f"{attribute} = {_VALUES[attribute].__name__}({inner})"


def fold_old_open(cls: type) -> None:
    """An ``_open(model, device, allow_fallback, options)`` that ``cls`` itself defines becomes the
    ``_open(model, request)`` that ``Backend.open`` calls, with one warning (``Backend.open`` settles the
    session such an ``_open`` makes without the request)."""
    method = vars(cls).get("_open")
    if method is None or len(inspect.signature(method).parameters) != 5:
        return

    def _open(self: Any, model: Any, request: Any) -> Any:
        return method(self, model, request.device, request.allow_fallback, dict(request.options))

    _open.__doc__ = method.__doc__
    cls._open = _open  # type: ignore[attr-defined]
    warn_deprecated(
        f"Backend._open(model, device, allow_fallback, options) (defined by {cls.__module__}.{cls.__qualname__})",
        "define _open(model, request: OpenRequest), read request.device, request.allow_fallback and "
        "request.options, and pass request=request to the Session you make",
    )


def fold_old_names(cls: type) -> None:
    """Fold the old names ``cls`` itself sets into the values that replace them, and warn once."""
    old = [name for name in MOVED if name in vars(cls)]
    if not old:
        return
    by_attribute: dict[str, list[str]] = {}
    for name in old:
        by_attribute.setdefault(MOVED[name].attribute, []).append(name)
    for attribute, names in by_attribute.items():
        given = {MOVED[n].field: _hook(cls, n) if MOVED[n].hook else vars(cls)[n] for n in names}
        current = getattr(cls, attribute, None)
        if current is None:  # only RuntimePackage has no default, and an old class may set one of its names
            current = RuntimePackage(module="", pip_extra="")
        setattr(cls, attribute, replace(current, **given))
    steps = " and ".join(_replacement(attribute, names) for attribute, names in by_attribute.items())
    warn_deprecated(f"Backend {', '.join(old)} (set by {cls.__module__}.{cls.__qualname__})", f"set {steps}")


class OldBackendNames:
    """What keeps a plug-in written against the old names working: ``Backend`` inherits it."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        fold_old_names(cls)
        fold_old_open(cls)

    if not TYPE_CHECKING:  # the type checker must not take every name for an attribute

        def __getattr__(self, name: str) -> Any:
            if name == "_device_error":
                warn_deprecated("Backend._device_error", "call deploykit.backends.traits.device_error(name, ...)")
                return lambda device, reason, hint: device_error(self.name, device, reason, hint)
            function = MADE_FUNCTIONS.get(name)
            if function is not None:
                warn_deprecated(f"Backend.{name}", f"call {function.__module__}.{function.__name__}(backend, ...)")
                return lambda *args: function(self, *args)
            moved = MOVED.get(name)
            if moved is None:
                raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
            warn_deprecated(f"Backend.{name}", f"read {moved.attribute}.{moved.field}")
            value = getattr(self, moved.attribute)
            if name == "oracle_label":
                return lambda device: value.label_for(self.name, device)
            if name == "oracle_blind_spot":
                return value.blind_spot_in
            if name == "subject":
                return lambda: value.subject_for(self.name)
            return getattr(value, moved.field)
