"""Every Ray address goes through one bounded connect (``distributed.cluster.check_reachable``) and one parser
(``parse_address``): a dead address fails within the timeout naming the address, an empty one is a usage
error, and an actor no node could hold is refused up front with the numbers, before Ray would wait forever."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from deploykit.distributed.cluster import check_reachable, parse_address
from deploykit.errors import BackendError, UsageError
from tests.assets.paths import REPO
from tests.fuzz.harness import invoke_checked, usage_said


def _closed_port() -> int:
    """A loopback port where nothing listens (bound once, then closed)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_a_dead_address_fails_within_the_bound_naming_it():
    address = f"127.0.0.1:{_closed_port()}"
    started = time.monotonic()
    with pytest.raises(BackendError, match=rf"ray cluster '{address}' \| cannot be reached within 2 s"):
        check_reachable(address, timeout_s=2)
    assert time.monotonic() - started < 30
    with pytest.raises(BackendError, match=r"cannot be reached within 1 s"):
        check_reachable(f"ray://127.0.0.1:{_closed_port()}", timeout_s=1)


@pytest.mark.parametrize("text", ["", "  ", "head", "head:", "head:0", "head:70000", "ray://", ":6379"])
def test_what_is_no_address_is_a_usage_error(text):
    with pytest.raises(UsageError, match="is not a Ray address; expected HOST:PORT"):
        parse_address(text)
    assert parse_address(" auto ") == "auto" and parse_address("[::1]:6379") == "[::1]:6379"


@pytest.mark.parametrize(
    "command",
    [
        ["fleet", "join"],
        ["fleet", "devices"],
        ["predict", "--engine", "ray"],
        ["serve", "--engine", "ray"],
        ["bench", "--fleet"],
    ],
    ids=["fleet-join", "fleet-devices", "predict", "serve", "bench"],
)
def test_an_empty_address_is_refused_by_every_command(command):
    flag = "--fleet" if command[0] == "bench" else "--address"
    args = ["bench", "--fleet", ""] if command[0] == "bench" else [*command, "--address", ""]
    result = invoke_checked(args)
    said = usage_said(result.output)
    assert result.exit_code == 2 and f"Invalid value for '{flag}': '': is not a Ray address" in said, said


def test_fleet_devices_on_a_dead_address_ends_with_the_address_not_a_hang():
    address = f"127.0.0.1:{_closed_port()}"
    done = subprocess.run(
        [sys.executable, "-m", "deploykit.cli.main", "fleet", "devices", "--address", address],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert f"error: ray cluster '{address}' | cannot be reached within" in done.stderr
    assert "Traceback" not in done.stderr


def test_an_actor_larger_than_this_machine_is_refused_before_ray_starts(tmp_path):
    from tests.assets.tiny import build_all

    (tmp_path / "tiny").mkdir()
    tiny = build_all(tmp_path / "tiny")
    cpus = (os.cpu_count() or 1) * 32
    result = invoke_checked(
        ["predict", tiny["classifier"], tiny["image"], "--engine", "ray", "--cpus-per-actor", str(cpus),
         "-o", tmp_path / "rows"],
        reads=[tiny["image"]], writes=[tmp_path / "rows"],
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    assert f"--cpus-per-actor {cpus} | this machine has {os.cpu_count()} CPU(s)" in " ".join(result.stderr.split())
    assert not Path(tmp_path / "rows").exists()


def test_serve_on_ray_at_a_dead_address_ends_with_the_address_not_a_hang(tmp_path):
    """The failed start's clean-up must not connect anywhere (Ray Serve's calls connect to "auto" by themselves)."""
    from tests.assets.tiny import build_all

    (tmp_path / "tiny").mkdir()
    model = build_all(tmp_path / "tiny")["classifier"]
    address = f"127.0.0.1:{_closed_port()}"
    done = subprocess.run(
        [sys.executable, "-m", "deploykit.cli.main", "serve", str(model), "--engine", "ray", "--address", address],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert f"error: ray cluster '{address}' | cannot be reached within" in done.stderr
    assert "Traceback" not in done.stderr
