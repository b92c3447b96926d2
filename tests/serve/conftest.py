"""Servers on loopback for the serve tests: in this process (``Server``) or as the real command."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.assets.paths import REPO, mobilenet_v2_weights, official_darknet
from tests.assets.signals import default_signals

PLUGINS = ("crasher=tests.assets.crashing_backend:CrashingBackend;slow=tests.serve.plugins:SlowBackend;"
           "aborter=tests.serve.plugins:AbortOnRunBackend")  # fmt: skip


@pytest.fixture(scope="session")
def mobilenet_v2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The MobileNetV2 recipe from torchvision's ImageNet weights: dynamic batch, (batch, 1000) scores."""
    from deploykit.recipes import build

    mobilenet_v2_weights()
    path = tmp_path_factory.mktemp("serve-mobilenet") / "mobilenet_v2.onnx"
    build("mobilenet_v2", path, verify_backends=())
    return path


@pytest.fixture(scope="session")
def yolov4_tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The YOLOv4-tiny recipe from the official COCO weights: static batch 1, decoded detections."""
    from deploykit.recipes import build

    official_darknet("yolov4-tiny")
    path = tmp_path_factory.mktemp("serve-yolo") / "yolov4-tiny.onnx"
    build("yolov4-tiny", path, verify_backends=())
    return path


class Command:
    """``deploykit serve`` running as a child process, with the ports it printed.

    A thread reads its stderr line by line into ``lines`` (so no line is lost in a pipe's buffer).
    """

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process = process
        self.http: int | None = None
        self.grpc: int | None = None
        self.metrics: int | None = None
        self.lines: list[str] = []
        self._new = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            with self._new:
                self.lines.append(line)
                self._new.notify_all()

    def read_until(self, pattern: str, timeout_s: float) -> str:
        """The first stderr line matching ``pattern``, waiting up to ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        with self._new:
            while True:
                found = next((line for line in self.lines if re.search(pattern, line)), None)
                if found is not None:
                    return found
                remaining = deadline - time.monotonic()
                if remaining <= 0 or (self.process.poll() is not None and not self._reader.is_alive()):
                    break
                self._new.wait(min(remaining, 0.2))
        raise AssertionError(
            f"no line matching {pattern!r} within {timeout_s} s; stderr so far:\n{''.join(self.lines)}"
        )

    def finish(self, timeout_s: float) -> tuple[int, str]:
        """Wait for the exit; (status, all of stderr)."""
        code = self.process.wait(timeout=timeout_s)
        self._reader.join(timeout=10)
        return code, "".join(self.lines)


def start_command(
    *args: str,
    env: dict[str, str] | None = None,
    ready: str | None = r"^ready:",
    endpoints: tuple[str, ...] = ("http", "grpc", "metrics"),
    timeout_s: float = 60,
) -> Command:
    """Start ``deploykit serve ARGS`` with ``endpoints`` on free loopback ports; wait until it listens
    (and, by default, is ready)."""
    ports_args = [arg for endpoint in endpoints for arg in (f"--{endpoint}-port", "0")]
    command = [sys.executable, "-m", "deploykit.cli.main", "serve", *args, *ports_args]
    process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "DEPLOYKIT_BACKENDS": PLUGINS, **(env or {})},
                               preexec_fn=default_signals)  # fmt: skip
    started = Command(process)
    try:
        line = started.read_until(r"^listening:", timeout_s)
        ports = {name: int(port) for name, port in re.findall(r"(\w+)=127\.0\.0\.1:(\d+)", line)}
        started.http, started.grpc, started.metrics = ports.get("http"), ports.get("grpc"), ports.get("metrics")
        if ready:
            started.read_until(ready, timeout_s)
    except BaseException:
        process.kill()
        started.finish(10)
        raise
    return started


@pytest.fixture
def command() -> Iterator[type[Command]]:
    """Servers started with ``start_command`` in a test are killed after it, whatever happened."""
    started: list[Command] = []

    def start(*args: str, **kwargs: object) -> Command:
        server = start_command(*args, **kwargs)  # type: ignore[arg-type]
        started.append(server)
        return server

    yield start  # type: ignore[misc]
    for server in started:
        if server.process.poll() is None:
            server.process.kill()
        server.finish(10)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
