"""What one benchmark configuration is, and parsing of the CLI's bench options."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from deploykit.errors import UsageError
from deploykit.validation import parse_duration as _parse_duration

SCENARIOS = ("singlestream", "offline", "multistream")


@dataclass(frozen=True)
class BenchConfig:
    """One row of a benchmark: a backend on a device with a batch, threads and a scenario."""

    backend: str
    device: str | None = None
    batch: int = 1
    threads: int | None = None
    precision: str | None = None
    scenario: str = "singlestream"
    streams: int = 1
    warmup: int = 10
    iterations: int | None = 100
    duration_s: float | None = None
    options: Mapping[str, Any] = field(default_factory=dict)

    def label(self) -> str:
        parts = [f"{self.backend}:{self.device}" if self.device else self.backend, f"b{self.batch}"]
        if self.threads:
            parts.append(f"t{self.threads}")
        if self.precision:
            parts.append(self.precision)
        if self.scenario == "multistream":
            parts.append(f"s{self.streams}")
        return " ".join(parts)

    def session_options(self) -> dict[str, Any]:
        options = dict(self.options)
        if self.threads:
            options["threads"] = self.threads
        return options

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["options"] = dict(self.options)
        data["label"] = self.label()
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BenchConfig:
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**known)


def check_timing(scenario: str, streams: int, warmup: int, iterations: int | None, duration_s: float | None) -> None:
    """How each configuration is timed, checked once for ``BenchPlan`` and ``expand_configs``.

    Raises:
        UsageError: an unknown scenario, no timed iteration, a negative warmup, or a multistream scenario
            without a stream; the message names the setting.
    """
    if scenario not in SCENARIOS:
        raise UsageError(
            f"scenario '{scenario}' | is not one of {', '.join(SCENARIOS)}.",
            hint="singlestream: one query at a time; offline: big batches; multistream: K streams.",
        )
    if duration_s is None and (iterations is None or iterations < 1):
        raise UsageError(
            f"iterations {iterations} | at least 1 timed iteration is needed.",
            hint="e.g. iterations=100 (or duration_s=10).",
        )
    if warmup < 0:
        raise UsageError(f"warmup {warmup} | cannot be negative.", hint="warmup=0 skips it.")
    if scenario == "multistream" and streams < 1:
        raise UsageError(f"streams {streams} | at least 1 stream is needed.", hint="e.g. streams=4.")


def parse_int_list(text: str, what: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        values = []
    if not values or any(v <= 0 for v in values):
        raise UsageError(
            f"{what} '{text}' | expected positive integers separated by commas.", hint=f"e.g. --{what} 1,4,8."
        )
    problem = repeated_sizes(values)
    if problem:
        raise UsageError(
            f"{what} '{text}' | {problem}", hint=f"e.g. --{what} {','.join(map(str, dict.fromkeys(values)))}."
        )
    return values


def repeated_sizes(values: Sequence[int | None]) -> str | None:
    """What is wrong with a sweep that names a size more than once (None when each is named once)."""
    twice = sorted({v for v in values if v is not None and values.count(v) > 1})
    return f"names {', '.join(map(str, twice))} more than once; a sweep measures each size once." if twice else None


def parse_duration(text: str, name: str = "duration") -> float:
    """``10s``, ``500ms``, ``2m``, ``1h``, ``1.5`` (seconds) → seconds (``validation.parse_duration``)."""
    return _parse_duration(text, name=name)
