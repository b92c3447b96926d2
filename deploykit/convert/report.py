"""The conversion report every converter returns and ``--report`` writes as JSON."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from typing import Any

from deploykit.io import atomic_path


@dataclass
class BackendParity:
    """Parity of one backend against the source framework, over every example input set."""

    backend: str
    device: str
    precision: str
    passed: bool
    cases: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None


@dataclass
class ConversionReport:
    """What a conversion did and how well the result matches its source."""

    source: str
    output: str
    converter: str
    exporter: str
    opset: int
    export_seconds: float
    gate_seconds: float = 0.0
    file_size_bytes: int = 0
    parameter_count: int = 0
    external_data: bool = False
    simplified: bool = False
    notes: list[str] = field(default_factory=list)
    op_histogram: dict[str, int] = field(default_factory=dict)
    parity: list[BackendParity] = field(default_factory=list)
    written: bool = False

    @property
    def passed(self) -> bool:
        return all(p.passed for p in self.parity)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["passed"] = self.passed
        return data

    def write_json(self, path: str | os.PathLike[str]) -> None:
        with atomic_path(path) as temporary:
            temporary.write_text(json.dumps(self.to_dict(), indent=2, default=str))
