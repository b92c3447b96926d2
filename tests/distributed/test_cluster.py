"""A local Ray that deploykit starts listens on loopback only: every listening socket of every process
it started (GCS, raylet, agents, workers) is checked, with a task run so that workers exist."""

from __future__ import annotations

import ipaddress

import pytest

from deploykit.distributed.cluster import check_loopback, connect, loopback_only
from deploykit.errors import BackendError


def _listening(pids: set[int]) -> list[tuple[str, int, int]]:
    import psutil

    found = []
    for connection in psutil.net_connections(kind="inet"):
        if connection.status == psutil.CONN_LISTEN and connection.pid in pids:
            found.append((connection.laddr.ip, connection.laddr.port, connection.pid))
    return found


def _is_loopback(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    mapped = getattr(ip, "ipv4_mapped", None)  # [::ffff:127.0.0.1], a dual-stack socket bound to loopback
    return (mapped or ip).is_loopback


def test_a_local_ray_listens_on_loopback_only(ray_module) -> None:
    import psutil

    with connect(None, num_cpus=1) as ray:

        @ray.remote
        def square(x: int) -> int:
            return x * x

        assert ray.get(square.remote(7)) == 49
        assert ray.util.get_node_ip_address() == "127.0.0.1"
        pids = {process.pid for process in psutil.Process().children(recursive=True)}
        listening = _listening(pids)
        names = {psutil.Process(pid).name() for _, _, pid in listening}
    # the test would prove nothing if Ray's own servers had not been seen
    assert "gcs_server" in names and "raylet" in names, listening
    outside = [entry for entry in listening if not _is_loopback(entry[0])]
    assert outside == [], f"Ray processes listening beyond loopback: {outside}"


def test_the_loopback_setting_is_put_back_after_start(ray_module) -> None:
    import os

    from ray._private import ray_constants

    before = (ray_constants.ENABLE_RAY_CLUSTER, os.environ.get("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"))
    with loopback_only():
        assert ray_constants.ENABLE_RAY_CLUSTER is False
    assert (ray_constants.ENABLE_RAY_CLUSTER, os.environ.get("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER")) == before


class _RayOnTheNetwork:
    """A Ray whose node took the machine's network address: what a Ray that ignores the setting does."""

    __version__ = "0.0-test"

    class util:
        @staticmethod
        def get_node_ip_address() -> str:
            return "192.0.2.7"


def test_a_ray_that_takes_a_network_address_is_refused_with_the_address() -> None:
    with pytest.raises(BackendError) as caught:
        check_loopback(_RayOnTheNetwork())
    message = str(caught.value)
    assert "192.0.2.7" in message and "127.0.0.1" in message and "listens on loopback only" in message
    assert "--address" in (caught.value.hint or "")
