"""What a benchmark is asked to do, as one value: ``BenchPlan``.

Built once at the edge (``deploykit bench`` builds it from its options, a script builds it by hand)
and passed whole: ``benchmark(model, plan)``; the fleet ships ``plan.to_dict()`` to every device
and each rebuilds it with ``BenchPlan.from_dict``. Frozen and checked when made, so a bad setting
fails before any worker starts. This module measures nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from deploykit.backends.options import OptionValue
from deploykit.bench.config import check_timing, repeated_sizes
from deploykit.bench.load import check_background_load
from deploykit.errors import UsageError
from deploykit.inputs import InputSetting
from deploykit.verify.isolated import DEFAULT_TIMEOUT_S
from deploykit.verify.settings import (
    ThresholdOverrides,
    VerifySettings,
    check_timeout,
    known_fields,
    normalize,
    settings_to_dict,
)

if TYPE_CHECKING:
    from deploykit.optimize.bundle import Bundle

#: The settings a bundle's chosen configuration fixes (``BenchPlan.from_bundle``).
BUNDLE_SETTINGS = ("backends", "batch", "threads", "precision")


def _sweep(value: Any, what: str) -> tuple[Any, ...] | None:
    if value is None:
        return None
    values = (value,) if isinstance(value, int) else tuple(value)
    if not values or any(v is not None and (not isinstance(v, int) or v < 1) for v in values):
        raise UsageError(f"{what} {value!r} | expected positive integers.", hint=f"e.g. {what}=(1, 4, 8).")
    problem = repeated_sizes(values)
    if problem:
        raise UsageError(
            f"{what} {value!r} | {problem}", hint=f"give each size once, e.g. {what}={tuple(dict.fromkeys(values))}."
        )
    return values


@dataclass(frozen=True)
class BenchPlan:
    """Everything ``benchmark`` needs besides the model and the input arrays.

    Attributes:
        backends: ``BACKEND`` or ``BACKEND:DEVICE`` specs; None: every available backend × device.
        batch: one size or a sweep; None: the model's own (its fixed batch, or 1 if dynamic).
        threads: one count or a sweep; None: the runtime's own.
        precision: one or several of f32, bf16, f16, int8 (``"f32,bf16"`` or a sequence); each
            backend runs those it can natively here. None: each device's default.
        scenario: ``singlestream`` (p50 is the headline), ``offline`` (throughput), or
            ``multistream`` (``streams`` concurrent queries on one session).
        warmup, iterations, duration_s: untimed runs, then a count or a duration of timed runs.
        shapes, batch_axes, seed: how seeded random inputs are shaped.
        oracle: ``auto`` (onnx's reference evaluator), ``none``, or a backend spec.
        thresholds: overrides of the verdict thresholds.
        max_drop: an accuracy budget (0.01 = 1 %) for the recommendation.
        isolate: measure each configuration in its own worker process.
        cost_per_hour: the device's price per hour, for cost per million inferences.
        options: extra backend options for every configuration.
        timeout_s: the most one configuration's worker may take.
        background_load: busy threads kept running while configurations are measured
            (``deploykit.bench.load``; 0: idle).
        rounds: isolated measurements of every configuration, interleaved (a rotated order each
            round); the ranking rule calls a configuration faster only from ``MIN_ROUNDS`` (5).
        oracle_memory_bytes: the address-space limit of the oracle's worker; None: three quarters
            of the memory available when it starts (``deploykit.verify.limits``).

    Raises:
        UsageError: a setting that cannot be used (checked when the plan is made); the message names the
            setting (the command line names its flag before a plan is made).
    """

    backends: tuple[str, ...] | None = None
    batch: tuple[int, ...] | None = None
    threads: tuple[int | None, ...] | None = None
    precision: str | None = None
    scenario: str = "singlestream"
    streams: int = 4
    warmup: int = 10
    iterations: int | None = 100
    duration_s: float | None = None
    shapes: Mapping[str, InputSetting] = field(default_factory=dict)
    batch_axes: Mapping[str, int] = field(default_factory=dict)
    seed: int = 0
    oracle: str = "auto"
    thresholds: ThresholdOverrides = field(default_factory=ThresholdOverrides)
    max_drop: float | None = None
    isolate: bool = True
    cost_per_hour: float | None = None
    options: Mapping[str, OptionValue] = field(default_factory=dict)
    timeout_s: float = DEFAULT_TIMEOUT_S
    background_load: int = 0
    rounds: int = 1
    oracle_memory_bytes: int | None = None

    def __post_init__(self) -> None:
        normalize(self)
        check_background_load(self.background_load)
        if self.rounds < 1:
            raise UsageError(
                f"rounds {self.rounds} | expected 1 or more.",
                hint="rounds=5 gives the ranking rule the evidence to call one configuration faster.",
            )
        if isinstance(self.backends, str):
            object.__setattr__(self, "backends", (self.backends,))
        elif self.backends is not None:
            object.__setattr__(self, "backends", tuple(self.backends) or None)
        object.__setattr__(self, "batch", _sweep(self.batch, "batch"))
        object.__setattr__(self, "threads", _sweep(self.threads, "threads"))
        check_timing(self.scenario, self.streams, self.warmup, self.iterations, self.duration_s)
        if self.max_drop is not None and not 0 <= self.max_drop <= 1:
            raise UsageError(
                f"max_drop {self.max_drop:g} | expected a share from 0 to 1.",
                hint="e.g. max_drop=0.01 (a drop of one point).",
            )
        check_timeout(self.timeout_s)

    def replace(self, **changes: Any) -> BenchPlan:
        """This plan with some settings changed (checked again)."""
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """Plain, JSON-ready data; ``BenchPlan.from_dict`` reads it back (on a fleet node, say)."""
        return settings_to_dict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BenchPlan:
        return cls(**known_fields(cls, data))

    def verify_settings(self, platforms: str | None = None) -> VerifySettings:
        """How ``deploykit.compare`` verifies what this plan measures (oracle, precision, inputs, thresholds,
        options, time and memory bounds), on ``platforms`` (``bench --platform``'s emulated targets)."""
        return VerifySettings(
            oracle=self.oracle,
            precision=self.precision,
            shapes=self.shapes,
            batch_axes=self.batch_axes,
            seed=self.seed,
            thresholds=self.thresholds,
            options=self.options,
            timeout_s=self.timeout_s,
            platforms=platforms,
            oracle_memory_bytes=self.oracle_memory_bytes,
        )

    @classmethod
    def from_bundle(cls, bundle: Bundle, base: BenchPlan | None = None) -> BenchPlan:
        """The plan that measures exactly a bundle's chosen configuration: its backend and device, its
        batch, its threads (None: the runtime's own), the precision it opens (an INT8 bundle pins its
        float layers' precision in its options) and its other session options, over ``base``'s other
        settings (iterations, oracle, rounds ...).

        Args:
            bundle: a bundle folder as ``deploykit.optimize.read_bundle`` reads it.
            base: the settings besides the configuration; default ``BenchPlan()``.

        Raises:
            UsageError: ``base`` sets one of ``BUNDLE_SETTINGS``, or an option the bundle sets: either
                would change the configuration the bundle chose.
        """
        base = base or cls()
        manifest = bundle.manifest
        changed = [name for name in BUNDLE_SETTINGS if getattr(base, name) is not None]
        if changed:
            raise UsageError(
                f"plan {', '.join(changed)} | a bundle is measured in the configuration it chose "
                f"({manifest.spec}); these settings would change it.",
                hint=f"leave them unset, or benchmark '{bundle.model_path}' itself to try other settings.",
            )
        options = bundle_options(bundle)
        twice = [name for name in base.options if name in options]
        if twice:
            raise UsageError(
                f"plan options {', '.join(repr(name) for name in twice)} | the bundle's configuration sets them "
                f"({', '.join(f'{name}={options[name]!r}' for name in twice)}); expected each option once.",
                hint="leave the bundle's own options out of the plan.",
            )
        return base.replace(
            backends=(manifest.spec,),
            batch=(manifest.batch,),
            threads=(manifest.threads,) if manifest.threads else None,
            precision=manifest.options.get("precision") or manifest.precision or None,
            options={**base.options, **options},
        )


def bundle_options(bundle: Bundle) -> dict[str, OptionValue]:
    """The session options a bundle's configuration sets besides its threads and precision (which are
    the plan's own settings)."""
    return {k: v for k, v in bundle.manifest.options.items() if k not in ("threads", "precision")}
