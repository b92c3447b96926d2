"""A backend that kills its process: the bench's subprocess isolation must survive it."""

from __future__ import annotations

import os
from pathlib import Path

from deploykit.backends.base import Backend, OpenRequest, Session
from deploykit.backends.traits import RuntimePackage
from deploykit.model import Model


class CrashingBackend(Backend):
    name = "crasher"
    runtime = RuntimePackage(module="os", pip_extra="none")

    def version(self) -> str:
        return "crasher 0"

    def devices(self) -> list[str]:
        return ["cpu"]

    def _open(self, model: Model, request: OpenRequest) -> Session:
        os.abort()


class HangingBackend(Backend):
    """A backend whose loading never ends: timeouts and interruptions must kill its worker."""

    name = "hanger"
    runtime = RuntimePackage(module="os", pip_extra="none")

    def version(self) -> str:
        return "hanger 0"

    def devices(self) -> list[str]:
        return ["cpu"]

    def _open(self, model: Model, request: OpenRequest) -> Session:
        marker = os.environ.get("DEPLOYKIT_HANGER_PIDFILE")
        if marker:
            Path(marker).write_text(str(os.getpid()))
        import time

        while True:
            time.sleep(1)


class RaisingBackend(Backend):
    """A plug-in whose runtime raises its own exception type while loading: the base class translates it."""

    name = "raiser"
    aliases = ("rz",)
    runtime = RuntimePackage(module="os", pip_extra="none")

    def version(self) -> str:
        return "raiser 0"

    def devices(self) -> list[str]:
        return ["cpu"]

    def _open(self, model: Model, request: OpenRequest) -> Session:
        raise RuntimeError("runtime internals\nop Foo is not implemented")


class NativeFormatBackend(RaisingBackend):
    """A plug-in that also reads a file format of its own (``formats``): its runtime's reason for such a
    file is the message, not "cannot be parsed as ONNX"."""

    name = "native"
    aliases = ()
    formats = (".onnx", ".mine")
