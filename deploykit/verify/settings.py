"""Verification settings as values: what ``compare`` and the converters' gate
are asked to do, built once at the edge (the CLI) and passed whole.

``ThresholdOverrides`` says which verdict thresholds the user changed (None: the precision's own
default, ``thresholds_for``); ``VerifySettings`` holds everything else a verification run needs
besides the model, the backends and the input arrays. Both are frozen, checked when made, and
travel across processes as ``to_dict()`` / ``from_dict()``. This module decides nothing.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from deploykit.backends.options import OptionValue
from deploykit.errors import UsageError
from deploykit.inputs import InputSetting
from deploykit.validation import check_number, check_tolerances, known_fields
from deploykit.verify.isolated import DEFAULT_TIMEOUT_S
from deploykit.verify.metrics import Thresholds, thresholds_for


@dataclass(frozen=True)
class ThresholdOverrides:
    """The verdict thresholds a user set (``--atol`` … ``--min-map``); None keeps the precision's default.

    Attributes:
        atol, rtol: f32 element-wise tolerances.
        min_cosine, min_snr_db: reduced precision, per output.
        min_top1_agreement, min_map: classifiers / detectors on real images.

    Raises:
        UsageError: a value is negative, not finite, or a minimum outside [0, 1].
    """

    atol: float | None = None
    rtol: float | None = None
    min_cosine: float | None = None
    min_snr_db: float | None = None
    min_top1_agreement: float | None = None
    min_map: float | None = None

    def __post_init__(self) -> None:  # bad values fail when the settings are made, in the CLI's words
        check_tolerances(atol=self.atol, rtol=self.rtol)
        thresholds_for("f32", **self.to_dict())

    def of(self, precision: str | None) -> Thresholds:
        """The thresholds a candidate at ``precision`` is judged by."""
        return thresholds_for(precision, **self.to_dict())

    def to_dict(self) -> dict[str, float | None]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, data: Mapping[str, float | None] | None) -> ThresholdOverrides:
        """From a dict of ``Thresholds`` field names (unknown names are a usage error)."""
        data = dict(data or {})
        unknown = sorted(set(data) - {f.name for f in fields(cls)})
        if unknown:
            raise UsageError(
                f"threshold '{unknown[0]}' | is not one of {', '.join(f.name for f in fields(cls))}.",
                hint="e.g. {'atol': 1e-4, 'min_cosine': 0.99}.",
            )
        return cls(**{k: None if v is None else float(v) for k, v in data.items()})


def shapes_to_dict(shapes: Mapping[str, InputSetting]) -> dict[str, dict[str, Any]]:
    return {
        name: {"shape": None if s.shape is None else list(s.shape), "low": s.low, "high": s.high}
        for name, s in shapes.items()
    }


def shapes_from(
    shapes: Mapping[str, Sequence[int] | InputSetting | Mapping[str, Any]] | None,
) -> dict[str, InputSetting]:
    """``--shape`` settings from what a caller gives: an ``InputSetting``, a shape, or its ``to_dict``."""
    settings = {}
    for name, value in (shapes or {}).items():
        if isinstance(value, InputSetting):
            settings[name] = value
        elif isinstance(value, Mapping):
            shape = value.get("shape")
            settings[name] = InputSetting(None if shape is None else tuple(shape), value.get("low"), value.get("high"))
        else:
            settings[name] = InputSetting(tuple(int(v) for v in value))
    return settings


def options_to_dict(options: Mapping[str, OptionValue]) -> dict[str, OptionValue]:
    """Backend options as plain data (a path becomes its text)."""
    return {k: os.fspath(v) if isinstance(v, os.PathLike) else v for k, v in options.items()}


def precision_text(precision: str | Sequence[str] | None) -> str | None:
    """One or several precisions as the comma-separated text the CLI takes (None: the device's own)."""
    if precision is None or isinstance(precision, str):
        return precision
    return ",".join(precision)


@dataclass(frozen=True)
class VerifySettings:
    """How ``compare`` runs: the oracle, precisions, random-input shaping, thresholds, workers.

    Attributes:
        oracle: ``auto`` (onnx's reference evaluator), ``reference``, ``none``, or a backend spec.
        precision: one or several of f32, bf16, f16, int8 (``"f32,bf16"`` or a sequence); None:
            each device's default.
        batch, shapes, batch_axes, seed: how random inputs are shaped (``deploykit.inputs``).
        thresholds: overrides of the verdict thresholds for every precision.
        options: backend options for every candidate.
        timeout_s: the most one worker process may take.
        isolate: one worker process per backend (turn off only for debugging).
        platforms: where the candidates run: ``host`` (default), ``linux/arm64``, or several.
        oracle_memory_bytes: the address-space limit of the oracle's worker; None: three quarters
            of the memory available when the check starts (``deploykit.verify.limits``).
    """

    oracle: str = "auto"
    precision: str | None = "f32"
    batch: int | None = None
    shapes: Mapping[str, InputSetting] = field(default_factory=dict)
    batch_axes: Mapping[str, int] = field(default_factory=dict)
    seed: int = 0
    thresholds: ThresholdOverrides = field(default_factory=ThresholdOverrides)
    options: Mapping[str, OptionValue] = field(default_factory=dict)
    timeout_s: float = DEFAULT_TIMEOUT_S
    isolate: bool = True
    platforms: str | None = None
    oracle_memory_bytes: int | None = None

    def __post_init__(self) -> None:
        normalize(self)
        check_timeout(self.timeout_s)
        if self.oracle_memory_bytes is not None:
            check_number(
                "--oracle-memory",
                self.oracle_memory_bytes,
                low=0.0,
                low_open=True,
                hint="bytes the oracle may take, e.g. --oracle-memory 16GiB.",
            )

    def to_dict(self) -> dict[str, Any]:
        return settings_to_dict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> VerifySettings:
        return cls(**known_fields(cls, data))


def check_timeout(timeout_s: float) -> None:
    """The one check of ``--timeout`` (the one the worker machinery makes), when the settings are made."""
    check_number("--timeout", timeout_s, low=0.0, low_open=True, hint="seconds a worker may take, e.g. --timeout 900.")


def normalize(settings: Any) -> None:
    """Coerce the shared fields of a frozen settings value to one form (called from ``__post_init__``)."""
    set_field = object.__setattr__
    set_field(settings, "precision", precision_text(settings.precision))
    set_field(settings, "shapes", shapes_from(settings.shapes))
    set_field(settings, "batch_axes", {k: int(v) for k, v in (settings.batch_axes or {}).items()})
    set_field(settings, "options", dict(settings.options or {}))
    if not isinstance(settings.thresholds, ThresholdOverrides):
        set_field(settings, "thresholds", ThresholdOverrides.from_dict(settings.thresholds))
    if isinstance(getattr(settings, "platforms", None), (list, tuple)):
        set_field(settings, "platforms", ",".join(settings.platforms))


def settings_to_dict(settings: Any) -> dict[str, Any]:
    """A settings value as plain, JSON-ready data (``from_dict`` reads it back)."""
    data: dict[str, Any] = {}
    for f in fields(settings):
        value = getattr(settings, f.name)
        if f.name == "shapes":
            value = shapes_to_dict(value)
        elif f.name == "options":
            value = options_to_dict(value)
        elif isinstance(value, ThresholdOverrides):
            value = value.to_dict()
        elif isinstance(value, tuple):
            value = list(value)
        elif isinstance(value, Mapping):
            value = dict(value)
        data[f.name] = value
    return data
