"""Connecting to Ray: the lazy import with its install hint, and a connection that cleans up after itself.

Ray is started (or joined) only for the duration of one call, and shut down again unless the caller
had already connected: a library call must not leave a Ray instance or its processes behind.

``ray.init`` replaces the process's SIGTERM handler (its own exits with code 15, after its native
handler prints a stack dump); the caller's handlers are put back once Ray is up, so ``deploykit``
still ends with 143 and a library user's handler still runs. SIGINT, SIGTERM and SIGHUP that come while
``ray.init`` runs wait for it to return (``deploykit.signals.DeferredSignals``); if one then ends the call, the Ray it
started is shut down first. A local Ray that cannot start under
this process's limits (open files, address space, file size, a full temporary folder) is refused
up front with the limit named, instead of Ray's tracebacks half a minute later.

A local Ray listens on loopback only. Ray replaces a node address of 127.0.0.1 by the machine's
network address and its servers bind that (or every interface) unless its cluster mode is off
(``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``, what Ray does by default on macOS and Windows); deploykit
turns it off while it starts a Ray of its own, and checks the node address Ray took afterwards.
Joining a cluster (``address``) is left as Ray does it.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import shutil
import signal
import socket
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from deploykit.distributed.reaper import start_reaper
from deploykit.errors import BackendError, BackendUnavailableError, UsageError
from deploykit.signals import TERMINATING, DeferredSignals

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
    stop = start(ray, address, num_cpus)
    if stop is None:
        yield ray
        return
    try:
        yield ray
    finally:
        stop()


#: How long the first TCP connection to a cluster's address may take before it counts as unreachable.
CONNECT_TIMEOUT_S = 10.0


def parse_address(text: str | None, name: str = "--address") -> str | None:
    """A Ray address as typed: ``None`` (a local Ray), ``auto``, ``local``, ``HOST:PORT`` or ``ray://HOST:PORT``.

    Raises:
        UsageError: empty, or a ``HOST:PORT`` whose port is no port.
    """
    if text is None:
        return None
    address = text.strip()
    if address in ("auto", "local"):
        return address
    host, port = _host_port(address)
    if not address or not host or port is None:
        raise UsageError(
            f"{name} '{text}' | is not a Ray address; expected HOST:PORT (the head's GCS, 6379 by default), "
            "ray://HOST:10001 or auto.",
            hint="e.g. --address 192.168.1.10:6379, or leave it out for a Ray on this machine.",
        )
    return address


def _host_port(address: str) -> tuple[str, int | None]:
    rest = address.removeprefix("ray://")
    host, _, port = rest.rpartition(":")
    host = host.strip("[]")  # an IPv6 literal
    return host, int(port) if port.isdigit() and 0 < int(port) < 65536 else None


def check_reachable(address: str, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """The one bounded connect every Ray address goes through first: a TCP connection to HOST:PORT within
    ``timeout_s``. Ray's own client retries an address where nothing listens for minutes, deaf to SIGTERM
    while it does; this says so in seconds, with the address. ``auto`` and ``local`` are Ray's to resolve.

    Raises:
        BackendError: nothing answers at the address within the timeout.
    """
    if address in ("auto", "local"):
        return
    host, port = _host_port(address)
    if port is None:
        parse_address(address)  # raises with the expected forms
        return
    try:
        socket.create_connection((host, port), timeout=timeout_s).close()
    except OSError as exc:
        reason = "timed out" if isinstance(exc, TimeoutError) else exc.strerror or str(exc)
        raise BackendError(
            f"ray cluster '{address}' | cannot be reached within {timeout_s:g} s ({reason}).",
            hint="check the address (HEAD:6379 for the head's GCS, ray://HEAD:10001 for Ray Client) and that "
            "`ray start --head` runs there and its port is open to this machine.",
        ) from exc


def check_resources(ray: Any, *, cpus_per_actor: float) -> None:
    """Refuse, up front, an actor no node of the cluster can hold (Ray would wait for one forever).

    Raises:
        UsageError: ``cpus_per_actor`` is more than the CPUs of the largest live node.
    """
    largest = max(
        (float(node.get("Resources", {}).get("CPU", 0)) for node in ray.nodes() if node.get("Alive")), default=0.0
    )
    if cpus_per_actor > largest:
        raise UsageError(
            f"--cpus-per-actor {cpus_per_actor:g} | the largest node of the cluster has {largest:g} CPU(s), so no "
            "actor could ever be placed (Ray would wait forever).",
            hint=f"pass --cpus-per-actor {max(1, int(largest))} or less, or add a larger node.",
        )


def start(ray: Any, address: str | None = None, num_cpus: int | None = None) -> Callable[[], None] | None:
    """Connect ``ray`` to a cluster unless it is connected (``address`` and ``num_cpus`` as in
    ``connect``); the function that shuts down what this call started, or None when Ray was already
    connected (the caller that connected it owns the shutdown).

    Raises:
        BackendError: the cluster at ``address`` cannot be reached, or a local Ray cannot run here.
    """
    if ray.is_initialized():
        return None
    # Ray's usage statistics are already off in every process that imports deploykit (deploykit.quiet).
    if address is None:
        check_local_limits()
    else:
        check_reachable(parse_address(address) or "auto")
    handlers = _signal_handlers()
    # A local Ray's processes must die with this driver even when it is killed with SIGKILL, also
    # while ray.init is still starting them: the watchdog starts first.
    reaper = start_reaper(os.path.dirname(ray.__file__)) if address is None else None
    # SIGINT, SIGTERM and SIGHUP wait for ray.init to return; handled below, once the caller's handlers are back
    deferred = DeferredSignals(TERMINATING, deliver_on_exit=False)
    try:
        with _ray_installs_no_signal_handlers(), deferred:
            if address is None:
                with loopback_only():
                    # "local": a Ray of our own, even where another local cluster runs (ray.init would join it)
                    ray.init(
                        address="local",
                        num_cpus=num_cpus,
                        include_dashboard=False,
                        log_to_driver=False,
                        logging_level=RAY_CONSOLE_LEVEL,
                    )
            else:
                ray.init(address=address, log_to_driver=False, logging_level=RAY_CONSOLE_LEVEL)
        _restore(handlers)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        _restore(handlers)
        if reaper is not None:
            reaper.kill()
            reaper.wait()
        deferred.deliver()  # a signal that came first, not the failed start, ends the command
        if address is None:
            raise BackendError(
                f"ray (local) | could not start a local Ray: {exc}",
                hint="check the free space of TMPDIR (or RAY_TMPDIR) and the limits (ulimit -n, -v, -f); "
                "or run with --engine local.",
            ) from exc
        raise BackendError(
            f"ray cluster '{address}' | cannot be reached or started: {exc}",
            hint="check the address (ray://HEAD:10001 or HEAD:6379) and that `ray start --head` runs there.",
        ) from exc

    def stop() -> None:
        ray.shutdown()
        if reaper is not None:
            reaper.kill()
            reaper.wait()

    # a Ctrl-C or SIGTERM that came during ray.init is handled now, and Ray shut down in order if it ends the call
    if deferred.held:
        try:
            deferred.deliver()
        except BaseException:
            stop()
            raise

    if address is None:
        try:
            check_loopback(ray)
        except BackendError:
            stop()
            raise
    return stop


#: What of Ray's own Python log lines a deploykit command shows on its console: errors. Its start-up notes
#: ("Started a local Ray instance", the token-authentication notice, Ray Data's execution plan) said
#: nothing the command does not say itself; Ray's log files in its session folder keep every line.
RAY_CONSOLE_LEVEL = logging.ERROR


def quiet_console(logger_name: str) -> None:
    """Ray's console handlers of ``logger_name`` (Ray Data configures its own) show ``RAY_CONSOLE_LEVEL`` and
    above; its file handlers keep every line."""
    for handler in logging.getLogger(logger_name).handlers:
        if isinstance(handler, logging.StreamHandler) and not isinstance(handler, logging.FileHandler):
            handler.setLevel(RAY_CONSOLE_LEVEL)


#: The only address a local Ray started by deploykit listens on.
LOOPBACK = "127.0.0.1"
_CLUSTER_MODE_VARIABLE = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


@contextlib.contextmanager
def loopback_only() -> Iterator[None]:
    """While the block runs, a Ray started in this process (``ray.init(address="local")``, or
    ``ray.cluster_utils.Cluster``) takes 127.0.0.1 as its node address, so each of its processes
    listens there.

    Ray's cluster mode, which makes it look up the machine's network address, is switched off for the
    block: in Ray's constants (already imported) and in the environment its processes inherit.
    """
    constants: Any = importlib.import_module("ray._private.ray_constants")
    saved_mode, saved_variable = constants.ENABLE_RAY_CLUSTER, os.environ.get(_CLUSTER_MODE_VARIABLE)
    constants.ENABLE_RAY_CLUSTER = False
    os.environ[_CLUSTER_MODE_VARIABLE] = "0"
    try:
        yield
    finally:
        constants.ENABLE_RAY_CLUSTER = saved_mode
        if saved_variable is None:
            os.environ.pop(_CLUSTER_MODE_VARIABLE, None)
        else:
            os.environ[_CLUSTER_MODE_VARIABLE] = saved_variable


def check_loopback(ray: Any) -> None:
    """Refuse a local Ray whose node address is not loopback (a Ray version that ignores the
    setting): its processes would listen on the machine's network.

    Raises:
        BackendError: Ray took another node address.
    """
    node_address = ray.util.get_node_ip_address()
    if node_address != LOOPBACK:
        raise BackendError(
            f"ray (local) | Ray {getattr(ray, '__version__', '?')} took {node_address} as its node address instead "
            f"of {LOOPBACK}; its servers would listen on the machine's network, and a local Ray deploykit starts "
            "listens on loopback only.",
            hint="install a Ray version that honours RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 (2.9 or newer), or start a "
            "cluster yourself (ray start --head --node-ip-address ...) and pass --address.",
        )


MIN_OPEN_FILES = 1024
MIN_ADDRESS_SPACE = 16 * 2**30  # Ray's processes reserve several GiB of virtual memory each
MIN_FILE_SIZE = 2**30
MIN_TEMP_FREE = 256 * 2**20


@contextlib.contextmanager
def _ray_installs_no_signal_handlers() -> Iterator[None]:
    """While ``ray.init`` runs in the block, Ray installs no SIGTERM handler, and the driver's core worker,
    made in it, no native failure handler (this driver prints no native stack dump, also on a crash
    later). Beside ``DeferredSignals``: a SIGTERM in ``ray.init`` met the handlers it installs as it goes
    (one exits at once, one kills the node) or its driver's native failure handler (a stack dump, then
    death by the signal); a KeyboardInterrupt there, once its local instance had started, left a
    half-made driver that Ray's own exit hook then shut down into a SIGSEGV."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    utils: Any = importlib.import_module("ray._private.utils")
    ray_sets_sigterm = utils.set_sigterm_handler
    utils.set_sigterm_handler = lambda handler: None  # the caller's handlers are put back after ray.init anyway
    constants: Any = importlib.import_module("ray._private.ray_constants")
    saved_native = constants.RAY_DISABLE_FAILURE_SIGNAL_HANDLER
    constants.RAY_DISABLE_FAILURE_SIGNAL_HANDLER = True
    try:
        yield
    finally:
        constants.RAY_DISABLE_FAILURE_SIGNAL_HANDLER = saved_native
        utils.set_sigterm_handler = ray_sets_sigterm


def _signal_handlers() -> dict[int, Any]:
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {signum: signal.getsignal(signum) for signum in TERMINATING}


def _restore(handlers: dict[int, Any]) -> None:
    for signum, handler in handlers.items():
        if handler is not None:
            signal.signal(signum, handler)


def check_local_limits() -> None:
    """Refuse to start a local Ray where it cannot run, naming the limit (raising the open-files soft
    limit to the hard one first, as a shell's ``ulimit -n`` would allow).

    Raises:
        BackendError: a resource limit or the temporary folder's free space is below what Ray needs.
    """
    try:
        import resource
    except ImportError:  # not a POSIX system: nothing to check
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < MIN_OPEN_FILES:
        target = 65536 if hard == resource.RLIM_INFINITY else min(hard, 65536)
        if target >= MIN_OPEN_FILES:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        else:
            _limit_error(
                f"open files (ulimit -n) is {soft}, hard limit {hard}", f"at least {MIN_OPEN_FILES}", "ulimit -n 4096"
            )
    for name, key, minimum, flag in (
        ("address space (ulimit -v)", "RLIMIT_AS", MIN_ADDRESS_SPACE, "ulimit -v unlimited"),
        ("file size (ulimit -f)", "RLIMIT_FSIZE", MIN_FILE_SIZE, "ulimit -f unlimited"),
    ):
        limit = resource.getrlimit(getattr(resource, key))[0]
        if limit != resource.RLIM_INFINITY and limit < minimum:
            _limit_error(f"{name} is {limit // 2**20} MiB", f"at least {minimum // 2**20} MiB, or unlimited", flag)
    # TMPDIR as Ray reads it: tempfile.gettempdir() skips a folder it cannot write a probe into (a full
    # one) and would check /tmp instead, while Ray still puts its session there
    temp = Path(os.environ.get("RAY_TMPDIR") or os.environ.get("TMPDIR") or tempfile.gettempdir())
    try:
        free = shutil.disk_usage(temp).free
    except OSError:
        return  # Ray reports a folder it cannot use itself
    if free < MIN_TEMP_FREE:
        raise BackendError(
            f"ray (local) | the temporary folder {temp} has {free // 2**20} MiB free; a local Ray writes its "
            f"session files and logs there and needs at least {MIN_TEMP_FREE // 2**20} MiB.",
            hint="free space there, or point TMPDIR (or RAY_TMPDIR) at a folder with room.",
        )


def _limit_error(found: str, expected: str, fix: str) -> None:
    raise BackendError(
        f"ray (local) | cannot start under this process's limits: {found}; a local Ray needs {expected}.",
        hint=f"raise the limit in the shell that runs deploykit ({fix}), or use --engine local.",
    )
