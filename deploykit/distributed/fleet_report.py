"""The merged report of a fleet benchmark as data: one bench report per device, or why there is none.

Per-device reports keep the ordinary bench schema (``deploykit.bench``), so ``deploykit report``
and ``report merge`` read them; the fleet document (``deploykit.fleet``) wraps them. Its views
(the device × configuration matrix, Markdown, HTML, the report folder) are ``fleet_views``.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from deploykit.bench.report import BenchmarkReport
from deploykit.bench.rows import Recommendation
from deploykit.document import JsonDocument
from deploykit.io import file_sha256

SCHEMA_VERSION = 1


@dataclass
class DeviceOutcome:
    """One device's part of a fleet run: its bench report, or why there is none.

    Attributes:
        name: the device name (its ``deploykit-device:NAME`` Ray resource).
        status: ``ok``, or ``failed`` with ``error`` saying why (no node, timeout, crash).
        node: the Ray node id that ran it.
        report: the device's bench report (``ok`` devices).
        elapsed_s: seconds from the fleet's start until this device finished.
    """

    name: str
    status: str  # "ok" or "failed"
    error: str | None
    node: str | None = None
    report: BenchmarkReport | None = None
    elapsed_s: float | None = None

    def to_dict(self) -> dict[str, Any]:
        report = None if self.report is None else self.report.to_dict()
        return {
            "name": self.name,
            "status": self.status,
            "error": self.error,
            "node": self.node,
            "report": report,
            "elapsed_s": self.elapsed_s,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DeviceOutcome:
        report = data.get("report")
        return cls(
            data["name"],
            data["status"],
            data.get("error"),
            data.get("node"),
            None if report is None else BenchmarkReport.from_dict(report, f"fleet device {data['name']}"),
            data.get("elapsed_s"),
        )


@dataclass
class FleetReport(JsonDocument):
    """A fleet benchmark: one outcome per device (its bench report, or why it failed).
    ``to_dict()`` is the ``deploykit.fleet`` document.

    Attributes:
        model_path, model_sha256: the benchmarked file on the machine that started the fleet.
        settings: the bench settings sent to every device, and ``device_timeout_s``.
        devices: one outcome per device, in the order asked for.
        created: ISO 8601 UTC time the fleet finished.
    """

    model_path: str
    model_sha256: str
    settings: dict[str, Any]
    devices: list[DeviceOutcome]
    created: str = field(default_factory=lambda: dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"))

    KIND: ClassVar[str] = "fleet report"
    HINT: ClassVar[str] = "pass a fleet.json written by deploykit bench --fleet."

    @classmethod
    def build(
        cls, model: Path, outcomes: list[DeviceOutcome], settings: dict[str, Any], device_timeout_s: float
    ) -> FleetReport:
        return cls(
            str(model),
            file_sha256(model),
            {**json.loads(json.dumps(settings, default=str)), "device_timeout_s": device_timeout_s},
            outcomes,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": "deploykit.fleet",
            "schema_version": SCHEMA_VERSION,
            "created": self.created,
            "model": {"path": self.model_path, "sha256": self.model_sha256},
            "settings": self.settings,
            "devices": [device.to_dict() for device in self.devices],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str | os.PathLike[str] = "<fleet report>") -> FleetReport:
        """The document ``to_dict`` wrote.

        Raises:
            ReportError: not a fleet report, or a device report that breaks the bench schema.
        """
        if not isinstance(data, Mapping) or data.get("schema") != "deploykit.fleet":
            raise cls.invalid(source, "is not a deploykit fleet report.")
        return cls(
            data["model"]["path"],
            data["model"]["sha256"],
            dict(data.get("settings") or {}),
            [DeviceOutcome.from_dict(d) for d in data["devices"]],
            data["created"],
        )

    def reports(self) -> dict[str, BenchmarkReport]:
        """Device name → its bench report, for the devices that finished."""
        return {d.name: d.report for d in self.devices if d.status == "ok" and d.report is not None}

    def recommendations(self) -> dict[str, Recommendation | None]:
        """Device name → the recommended configuration there (None: failed, or nothing was verified)."""
        return {d.name: None if d.report is None else d.report.recommendation for d in self.devices}
