"""A device name as one value: ``Device`` (the text as given, its kind, its index), read by one parser,
and ``DeviceNames``, the names a backend takes and how it refuses one it does not (a ``UsageError``
worded the same way by every backend). A backend's module holds its ``DeviceNames``; whether a device
it names exists on this machine is the backend's to say (``traits.device_error``).

Nothing here imports a runtime or the registry.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from deploykit.errors import UsageError


@dataclass(frozen=True)
class Device:
    """A device name, read once.

    Attributes:
        text: the name as given (``cuda:1``, ``CPU``, ``vulkan:0``, ``GPU.1``, ``AUTO:GPU,CPU``).
        kind: what comes before the index or the detail, lower-case (``cuda``, ``cpu``, ``gpu``, ``auto``).
        index: the device's number when the name gives one (``cuda:1``, OpenVINO's ``GPU.1``), else None.
        detail: what follows ``:`` when it is not a number (``openvino:GPU``, ``AUTO:GPU,CPU``), as given.
    """

    text: str
    kind: str
    index: int | None = None
    detail: str = ""

    @classmethod
    def parse(cls, text: str, *, index_separator: str = ":") -> Device:
        """Read ``text`` as ``kind[<index_separator>N][:detail]``; never raises (``DeviceNames.parse``
        refuses what a backend does not take). OpenVINO numbers its devices with ``.`` (``GPU.1``)."""
        head, colon, tail = text.strip().partition(":")
        index: int | None = None
        if index_separator == ":":
            if tail.isdigit():
                index, tail = int(tail), ""
        else:
            head, _, number = head.partition(index_separator)
            index = int(number) if number.isdigit() else None
        return cls(text=text, kind=head.lower(), index=index, detail=tail if colon else "")

    @property
    def number(self) -> int:
        """The index, 0 when the name gives none (``cuda`` is ``cuda:0``)."""
        return self.index or 0

    def is_bare(self, kind: str) -> bool:
        """True when the name is ``kind`` alone, in any case, without an index or a detail."""
        return self.kind == kind and self.index is None and not self.detail

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class DeviceNames:
    """The device names a backend takes; ``parse`` refuses any other with the backend's wording.

    Attributes:
        kinds: the kinds taken, lower-case (after ``aliases``).
        expected: the names taken, as the message lists them (``cpu, vulkan or vulkan:N``).
        indexed: the kinds that take an index (``vulkan:1``); the others refuse one.
        details: kind → the details it takes after ``:`` (compared upper-case: ``openvino:GPU``).
        aliases: another spelling of a kind → the kind (ONNX Runtime's ``gpu`` is ``cuda``).
        problem: what the message says is wrong with a name not taken.
        listed: what the hint says ``deploykit backends`` lists (``devices``, OpenCV's ``targets``).
    """

    kinds: frozenset[str]
    expected: str
    indexed: frozenset[str] = frozenset()
    details: Mapping[str, frozenset[str]] = field(default_factory=dict)
    aliases: Mapping[str, str] = field(default_factory=dict)
    problem: str = "is not a device name"
    listed: str = "devices"

    def parse(self, backend: str, text: str) -> Device:
        """``text`` as a ``Device`` of a kind this backend takes (an alias replaced by its kind).

        Raises:
            UsageError: ``text`` names no device of the backend, with the names it takes.
        """
        device = Device.parse(text)
        kind = self.aliases.get(device.kind, device.kind)
        taken = kind in self.kinds
        if device.index is not None and kind not in self.indexed:
            taken = False
        if device.detail and device.detail.upper() not in self.details.get(kind, frozenset()):
            taken = False
        if not taken:
            raise UsageError(
                f"backend '{backend}' | device '{text}' {self.problem}; expected {self.expected}.",
                hint=f"'deploykit backends' lists the {self.listed} this machine offers.",
            )
        return Device(text=text, kind=kind, index=device.index, detail=device.detail)
