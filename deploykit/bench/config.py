"""What one benchmark configuration is, and parsing of the CLI's bench options."""

from __future__ import annotations

from collections.abc import Mapping
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


def parse_int_list(text: str, what: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        values = []
    if not values or any(v <= 0 for v in values):
        raise UsageError(
            f"{what} '{text}' | expected positive integers separated by commas.", hint=f"e.g. --{what} 1,4,8."
        )
    return values


def parse_duration(text: str, name: str = "duration") -> float:
    """``10s``, ``500ms``, ``2m``, ``1h``, ``1.5`` (seconds) → seconds (``validation.parse_duration``)."""
    return _parse_duration(text, name=name)
