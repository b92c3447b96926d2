"""How ``quantize`` works, as one value: ``QuantizeSettings``.

Built once at the edge (``deploykit quantize`` builds it from its options) and passed whole:
``quantize(model, output, settings, calibrate=...)``. The data (``calibrate``, ``evaluate_on``) and
the files written (``output``, ``ir``) stay arguments of ``quantize``: they are paths, not settings.
``quantize`` checks the values (with messages that name the options); this module decides nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from deploykit.quantize.calibration import DEFAULT_CALIBRATION_SIZE, DEFAULT_HELD_OUT
from deploykit.verify.settings import known_fields


@dataclass(frozen=True)
class QuantizeSettings:
    """What to make and how to judge it.

    Attributes:
        fp16: convert to float16 (inputs/outputs stay float32) instead of quantizing.
        engine: the quantizer, ``ort`` (ONNX Runtime ``quantize_static``) or ``nncf`` (needs the
            ``quantize`` extra); ``--quantizer`` on the command line.
        method: ORT calibration: ``minmax`` (default), ``entropy`` or ``percentile``.
        calibration_size: at most this many calibration samples.
        held_out: fraction of the calibration data kept for the accuracy delta (never calibrated on).
        max_drop: accuracy budget (``"1%"`` or 0.01): NNCF restores layers until the drop fits; ORT
            refuses a model over budget.
        exclude: node names to keep in float.
        quantize_head: also quantize a detector's decode head (kept float by default).
        per_channel: per-channel weight scales (ORT).
        debug_layers: report the 10 nodes whose outputs diverge most.
        measure_speed: time both models on ``backends`` in isolated workers.
        backends: backend specs for the speed measurement (default: every available one).
        iterations: timed runs per configuration and round.
        rounds: f32 and the result alternate this many times; p50 is the median of the rounds.
        seed: the held-out split's shuffle.
        judge: the backend whose ``Session`` runs both models for the accuracy delta (default: the
            backend registry's default, ONNX Runtime on the CPU).
    """

    fp16: bool = False
    engine: str = "ort"
    method: str | None = None
    calibration_size: int = DEFAULT_CALIBRATION_SIZE
    held_out: float = DEFAULT_HELD_OUT
    max_drop: str | float | None = None
    exclude: tuple[str, ...] = ()
    quantize_head: bool = False
    per_channel: bool = True
    debug_layers: bool = False
    measure_speed: bool = True
    backends: tuple[str, ...] | None = None
    iterations: int = 50
    rounds: int = 3
    seed: int = 0
    judge: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "exclude", _strings(self.exclude) or ())
        object.__setattr__(self, "backends", _strings(self.backends))

    def to_dict(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["exclude"] = list(self.exclude)
        data["backends"] = None if self.backends is None else list(self.backends)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> QuantizeSettings:
        return cls(**known_fields(cls, data))


def _strings(values: str | Sequence[str] | None) -> tuple[str, ...] | None:
    if values is None:
        return None
    return (values,) if isinstance(values, str) else tuple(values)
