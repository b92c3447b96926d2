"""The platform plug-in interface: where a candidate's worker runs.

A platform changes one thing about a verification or a bench run: the Python that starts the
worker (``deploykit.workers.Interpreter``). The job protocol, the oracle (always on the
host) and the verdicts stay the same. This module must not prepare anything: building emulated
targets lives in ``emulated``.
"""

from __future__ import annotations

import abc
import platform as host_platform
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from deploykit.workers import HOST, Interpreter


@dataclass(frozen=True)
class PlatformStatus:
    """What ``platforms list`` shows for one platform.

    Attributes:
        name: ``host``, ``linux/arm64`` ...
        state: ``ready``, ``absent`` (never added), ``half-built`` (an interrupted ``add``) or
            ``broken`` (prepared, but its self-test failed).
        cpu: the (emulated) CPU, e.g. ``cortex-a76`` with the features the target reports.
        emulator: e.g. ``qemu-aarch64 10.0.13``; empty on the host.
        python: the target's Python version.
        runtimes: runtime → version in the target, with the host's version when it differs.
        detail: one sentence: why it is not ready, or what was substituted.
    """

    name: str
    state: str
    cpu: str = ""
    emulator: str = ""
    python: str = ""
    runtimes: Mapping[str, str] = field(default_factory=dict)
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "state": self.state,
            "cpu": self.cpu,
            "emulator": self.emulator,
            "python": self.python,
            "runtimes": dict(self.runtimes),
            "detail": self.detail,
        }


STORED_PRECISIONS = ("f32", "f16", "bf16", "int8")
"""The precisions a model file may be stored in (what ``RuntimeClaims.model_precision`` maps)."""


@dataclass(frozen=True)
class RuntimeClaims:
    """What one runtime claims on one device of a platform, asked there: on an emulated target,
    by the target's build on the emulated CPU (``probe``), never by the host's.

    Attributes:
        precisions: what it computes natively (``Backend.precisions``), ``f32`` first.
        model_precision: stored precision → the precision a backend without a precision setting
            runs such a model in (``Backend.model_precision``).
    """

    precisions: tuple[str, ...]
    model_precision: Mapping[str, str] = field(default_factory=dict)

    def runs(self, stored: str) -> str:
        return self.model_precision.get(stored, stored)


class Platform(abc.ABC):
    """A place a worker can run: this machine, or an emulated target."""

    name: str
    emulated: ClassVar[bool] = False

    @abc.abstractmethod
    def claims(self, backend: str, device: str) -> RuntimeClaims | None:
        """What ``backend`` claims on ``device`` here; None when it does not run here (or, on a
        target, that device is not one it offers): the worker then says why."""

    @abc.abstractmethod
    def interpreter(self) -> Interpreter:
        """The Python that runs workers here; raises ``PlatformError`` when it cannot start."""

    @abc.abstractmethod
    def status(self, *, self_test: bool = True) -> PlatformStatus:
        """What is prepared and, with ``self_test``, what a one-line run in it reports."""

    def describe(self) -> str:
        """One line for a report: the platform, its CPU, and that timings are emulated."""
        return self.name


class HostPlatform(Platform):
    """This machine: workers run in this process's own Python."""

    name = "host"

    def interpreter(self) -> Interpreter:
        return HOST

    def claims(self, backend: str, device: str) -> RuntimeClaims | None:
        from deploykit.backends.registry import get_backend

        found = get_backend(backend)
        if not found.is_available():
            return None
        mapping = {own: found.model_precision(own, device) for own in STORED_PRECISIONS}
        return RuntimeClaims(tuple(found.precisions(device)), mapping)

    def status(self, *, self_test: bool = True) -> PlatformStatus:
        import sys

        from deploykit.backends.registry import backend_names, get_backend

        runtimes = {}
        for name in backend_names():
            backend = get_backend(name)
            if (backend.search.default_candidate or backend.search.searched_when_ready) and backend.is_available():
                runtimes[name] = backend.version()
        return PlatformStatus(
            self.name,
            "ready",
            cpu=f"{host_platform.machine()} {host_platform.processor() or ''}".strip(),
            python=sys.version.split()[0],
            runtimes=runtimes,
        )

    def describe(self) -> str:
        return f"host ({host_platform.machine()})"
