"""Connecting to Ray: the lazy import with its install hint, and a connection that cleans up after itself.

Ray is started (or joined) only for the duration of one call, and shut down again unless the caller
had already connected: a library call must not leave a Ray instance or its processes behind.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

from deploykit.errors import BackendError, BackendUnavailableError

#: Custom Ray resource a device node carries: ``deploykit-device:<name>`` with capacity 1.
DEVICE_RESOURCE_PREFIX = "deploykit-device:"


def require_ray() -> Any:
    """Import Ray (with Ray Data) or say which extra to install.

    Raises:
        BackendUnavailableError: Ray or Ray Data cannot be imported.
    """
    try:
        import ray
        import ray.data
    except ImportError as exc:
        raise BackendUnavailableError(
            f"ray | cannot be imported ({exc}); the distributed engine and fleet benchmarks run on Ray.",
            hint="pip install 'deploykit[ray]' (or use --engine local).",
        ) from exc
    return ray


@contextlib.contextmanager
def connect(address: str | None = None, num_cpus: int | None = None) -> Iterator[Any]:
    """Yield the ``ray`` module connected to a cluster; shut Ray down afterwards if this call started it.

    Args:
        address: ``None`` starts a local Ray on this machine; ``auto``, ``HOST:PORT`` or
            ``ray://HOST:10001`` joins an existing cluster.
        num_cpus: CPUs of the local instance (ignored when joining a cluster).

    Raises:
        BackendUnavailableError: Ray is not installed.
        BackendError: the cluster at ``address`` cannot be reached.
    """
    ray = require_ray()
    if not start(ray, address, num_cpus):
        yield ray
        return
    try:
        yield ray
    finally:
        ray.shutdown()


def start(ray: Any, address: str | None = None, num_cpus: int | None = None) -> bool:
    """Connect ``ray`` to a cluster unless it is connected; whether this call connected it (and so
    owns the shutdown). ``address`` and ``num_cpus`` as in ``connect``.

    Raises:
        BackendError: the cluster at ``address`` cannot be reached.
    """
    if ray.is_initialized():
        return False
    # Usage statistics are a network call; a deploy tool must not make one behind the user's back.
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    try:
        if address is None:
            # "local": a Ray of our own, even where another local cluster runs (ray.init would join it)
            ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)
        else:
            ray.init(address=address, log_to_driver=False)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise BackendError(
            f"ray cluster '{address or 'local'}' | cannot be reached or started: {exc}",
            hint="check the address (ray://HEAD:10001 or HEAD:6379) and that `ray start --head` runs there.",
        ) from exc
    return True
