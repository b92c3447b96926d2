"""What ``optimize`` is asked to search, as one value: ``OptimizePlan``.

Built once at the edge (``deploykit optimize`` builds it from its options) and passed whole:
``optimize(model, images, plan, output=...)``. ``OptimizeSettings`` (in ``results``) is the other
end: the record, in the report, of how the search actually ran. ``optimize`` checks the values,
with messages that name the options; this module decides nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from deploykit.bench.load import check_background_load
from deploykit.optimize.candidates import ENGINES
from deploykit.optimize.rounds import WORKER_TIMEOUT_S
from deploykit.verify.settings import check_timeout, known_fields


@dataclass(frozen=True)
class OptimizePlan:
    """The search space and its budgets.

    Attributes:
        max_drop: the accuracy budget: ``"1%"`` or 0.01 (default); 0 keeps f32 answers only.
        backends: ``BACKEND[:DEVICE]`` specs; default every available backend × device.
        scenario: ``singlestream`` (headline p50 latency) or ``offline`` (headline throughput).
        time_budget: ``"5m"`` (default), ``"90s"`` or seconds, for the whole command.
        quantize: make INT8 (and FP16, where a device runs f16) variants; needs images.
        threads: thread counts to search (default 1, 2, 4 ... up to the usable CPUs).
        batches: batch sizes for ``offline`` (default 1 and 8, or the model's fixed batch).
        engines: the INT8 quantizers: ``ort`` and ``nncf`` (default both; NNCF where installed).
        seed: the image split and random inputs.
        timeout_s: the most one measurement's worker may take.
        background_load: busy threads kept running while candidates are measured
            (``deploykit.bench.load``; 0: idle), so the choice holds on a busy device.
    """

    max_drop: str | float | None = None
    backends: tuple[str, ...] | None = None
    scenario: str = "singlestream"
    time_budget: str | float | None = None
    quantize: bool = True
    threads: tuple[int, ...] | None = None
    batches: tuple[int, ...] | None = None
    engines: tuple[str, ...] = ENGINES
    seed: int = 0
    timeout_s: float = WORKER_TIMEOUT_S
    background_load: int = 0

    def __post_init__(self) -> None:
        for key in ("backends", "threads", "batches", "engines"):
            object.__setattr__(self, key, _tuple(getattr(self, key)))
        check_timeout(self.timeout_s)
        check_background_load(self.background_load)

    def to_dict(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        return {k: list(v) if isinstance(v, tuple) else v for k, v in data.items()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> OptimizePlan:
        return cls(**known_fields(cls, data))


def _tuple(values: Any) -> Any:
    if values is None:
        return None
    return (values,) if isinstance(values, str | int) else tuple(values)
