"""Servers on loopback for the serve tests: in this process (``Server``) or as the real command."""

from __future__ import annotations

import os
import re
import select
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.assets.paths import REPO, mobilenet_v2_weights, official_darknet

PLUGINS = ("crasher=tests.assets.crashing_backend:CrashingBackend;"
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


@dataclass
class Command:
    """``deploykit serve`` running as a child process, with the ports it printed."""

    process: subprocess.Popen[str]
    http: int | None
    grpc: int | None
    metrics: int | None
    lines: list[str]

    def read_until(self, pattern: str, timeout_s: float) -> str:
        """The first stderr line matching ``pattern`` (lines read are kept in ``lines``)."""
        deadline = time.monotonic() + timeout_s
        stream = self.process.stderr
        assert stream is not None
        while time.monotonic() < deadline:
            ready, _, _ = select.select([stream], [], [], 0.1)
            if ready:
                line = stream.readline()
                if not line:
                    break
                self.lines.append(line)
                if re.search(pattern, line):
                    return line
        raise AssertionError(
            f"no line matching {pattern!r} within {timeout_s} s; stderr so far:\n{''.join(self.lines)}"
        )


def start_command(*args: str, env: dict[str, str] | None = None, ready: str | None = r"^ready:") -> Command:
    """Start ``deploykit serve ARGS`` on free loopback ports; wait until it listens (and, by default, is ready)."""
    command = [sys.executable, "-m", "deploykit.cli.main", "serve", *args,
               "--http-port", "0", "--grpc-port", "0", "--metrics-port", "0"]  # fmt: skip
    process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "DEPLOYKIT_BACKENDS": PLUGINS, **(env or {})})  # fmt: skip
    started = Command(process, None, None, None, [])
    try:
        line = started.read_until(r"^listening:", 60)
        ports = dict(re.findall(r"(\w+)=127\.0\.0\.1:(\d+)", line))
        started.http, started.grpc = int(ports["http"]), int(ports["grpc"])
        started.metrics = int(ports["metrics"])
        if ready:
            started.read_until(ready, 60)
    except BaseException:
        process.kill()
        process.communicate(timeout=10)
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
        server.process.communicate(timeout=10)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
