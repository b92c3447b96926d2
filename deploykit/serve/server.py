"""A running server: the HTTP app on uvicorn, the gRPC service and the metrics endpoint, in one process.

``Server`` starts the three front ends on their own threads and loads the models in the
background (the server is live at once, ready when every model is). ``stop`` stops taking
connections, lets requests in flight finish (bounded by ``shutdown_timeout_s``), then closes the
sessions. ``serve`` is the blocking form the CLI uses: it runs until SIGTERM or SIGINT.
"""

from __future__ import annotations

import errno
import logging
import signal
import socket
import threading
import time
from collections.abc import Callable, Sequence
from types import FrameType
from typing import TYPE_CHECKING, Any

from deploykit.errors import BackendUnavailableError, DeployKitError, ResourceError, ServeError, UsageError
from deploykit.serve.config import BatchPolicy, RaySettings, ServedModel, ServerSettings
from deploykit.serve.metrics import ServerMetrics
from deploykit.serve.repository import Repository
from deploykit.serve.shared_memory import SharedMemoryRegions

if TYPE_CHECKING:
    from deploykit.serve.ray_engine import RayServer

log = logging.getLogger("deploykit.serve")
# uvicorn's choice: httptools' C parser and uvloop where installed (the serve extra installs them), else h11
# and asyncio. A 2 MB body parsed by h11 costs milliseconds (benchmarks/serve.py measures both). With
# "auto" and httptools installed, infer bodies are received into one buffer (``http_protocol``); any other
# value is given to uvicorn as it is.
UVICORN_HTTP = "auto"
UVICORN_LOOP = "auto"


def bind_error(flag: str, host: str, port: int, exc: OSError) -> DeployKitError:
    """A port that cannot be bound: taken by another process (``ResourceError``: the same command works
    once it is free), or refused for what the caller asked, an address this machine lacks or a port
    below 1024 without the privilege (``UsageError``)."""
    kind = ResourceError if exc.errno == errno.EADDRINUSE else UsageError
    return kind(f"{flag} {port} | cannot bind {host}:{port}: {exc.strerror or exc}.", hint="pass another port, or 0.")


def _listen(host: str, port: int, flag: str) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise bind_error(flag, host, port, exc) from exc
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


class Server:
    """The v2 inference server for some models, started with ``start`` and ended with ``stop``.

    Attributes:
        repository: the served models by name.
        metrics: the Prometheus registry and metrics.
        http_port, grpc_port, metrics_port: the bound ports (None where that front end is off).
    """

    def __init__(
        self,
        models: Sequence[ServedModel],
        policy: BatchPolicy | None = None,
        settings: ServerSettings | None = None,
    ) -> None:
        self.models = list(models)
        self.settings = settings or ServerSettings()
        self.policy = policy or BatchPolicy()
        self.metrics = ServerMetrics()
        regions = SharedMemoryRegions(
            not self.settings.is_remote, f"it is bound to {self.settings.host}, which other machines reach"
        )
        self.repository = Repository(
            models,
            self.policy,
            self.metrics,
            load_timeout_s=self.settings.load_timeout_s,
            shared_memory=regions,
            unload_timeout_s=self.settings.shutdown_timeout_s,
        )
        self.http_port: int | None = None
        self.grpc_port: int | None = None
        self.metrics_port: int | None = None
        self._uvicorn: Any = None
        self._http_thread: threading.Thread | None = None
        self._grpc: Any = None
        self._metrics_server: Any = None
        self._stopped = threading.Event()
        self._started_at = 0.0

    def start(self) -> Server:
        """Bind every front end and start loading the models; returns at once."""
        settings = self.settings
        self._started_at = time.perf_counter()
        if settings.reuse_large_buffers:
            from deploykit.serve.memory import reuse_large_buffers

            log.info("%s", reuse_large_buffers())
        try:
            if settings.http_port is not None:
                self._start_http(_listen(settings.host, settings.http_port, "--http-port"))
            if settings.grpc_port is not None:
                from deploykit.serve.grpc_service import create_server

                self._grpc, self.grpc_port = create_server(
                    self.repository,
                    settings.host,
                    settings.grpc_port,
                    token=settings.token,
                    max_request_bytes=settings.max_request_bytes,
                )
                self._grpc.start()
            if settings.metrics_port is not None:
                self._start_metrics(settings.host, settings.metrics_port)
        except BaseException:
            self.stop(timeout_s=0)
            raise
        self.repository.start()
        return self

    def _start_http(self, sock: socket.socket) -> None:
        import uvicorn

        from deploykit.serve.http import INFER_PATH, create_app
        from deploykit.serve.http_protocol import protocol_for

        app = create_app(
            self.repository,
            token=self.settings.token,
            max_request_bytes=self.settings.max_request_bytes,
            raw_infer=True,  # uvicorn writes the replies' memoryviews as they are
        )
        config = uvicorn.Config(
            app,
            log_level="warning",
            access_log=False,
            lifespan="off",
            http=(UVICORN_HTTP == "auto" and protocol_for(self.settings.max_request_bytes, INFER_PATH)) or UVICORN_HTTP,
            loop=UVICORN_LOOP,
            timeout_graceful_shutdown=max(1, int(self.settings.shutdown_timeout_s)),
            timeout_keep_alive=30,
        )
        self._uvicorn = uvicorn.Server(config)
        self.http_port = sock.getsockname()[1]
        self._http_thread = threading.Thread(
            target=self._uvicorn.run, kwargs={"sockets": [sock]}, name="serve-http", daemon=True
        )
        self._http_thread.start()

    def _start_metrics(self, host: str, port: int) -> None:
        from wsgiref.simple_server import WSGIRequestHandler, make_server

        from prometheus_client import make_wsgi_app
        from prometheus_client.exposition import ThreadingWSGIServer

        class _Quiet(WSGIRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

        class _MetricsServer(ThreadingWSGIServer):
            address_family = socket.AF_INET6 if ":" in host else socket.AF_INET

        try:
            httpd = make_server(host, port, make_wsgi_app(self.metrics.registry), _MetricsServer, handler_class=_Quiet)
        except OSError as exc:
            raise bind_error("--metrics-port", host, port, exc) from exc
        self._metrics_server = httpd
        self.metrics_port = httpd.server_address[1]
        threading.Thread(target=httpd.serve_forever, name="serve-metrics", daemon=True).start()

    @property
    def ready(self) -> bool:
        return self.repository.ready

    def wait_ready(self, timeout_s: float = 60.0) -> bool:
        """Wait until every model is ready, or one can no longer become ready; whether all are."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            states = [r.state for r in self.repository.runners.values()]
            if all(s == "ready" for s in states):
                return True
            if "loading" not in states:
                return False
            time.sleep(0.02)
        return False

    @property
    def startup_s(self) -> float:
        return time.perf_counter() - self._started_at

    def problems(self) -> list[str]:
        """Why each model that is not ready is not (for the CLI)."""
        return [
            f"model '{r.model.name}': {r.problem or r.state}" for r in self.repository.runners.values() if not r.ready
        ]

    def stop(self, timeout_s: float | None = None) -> None:
        """Stop taking requests, finish those in flight (bounded), close the sessions. Idempotent."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        timeout = self.settings.shutdown_timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + timeout
        self.repository.stopping = True  # readiness goes false first, so balancers stop sending
        grpc_done = self._grpc.stop(grace=timeout) if self._grpc is not None else None
        if self._uvicorn is not None:
            self._uvicorn.should_exit = True
        if self._http_thread is not None:
            self._http_thread.join(timeout=max(0.0, deadline - time.monotonic()) + 1.0)
            if self._http_thread.is_alive():
                self._uvicorn.force_exit = True
                self._http_thread.join(timeout=2.0)
        if grpc_done is not None:
            grpc_done.wait(timeout=max(0.0, deadline - time.monotonic()) + 1.0)
        self.repository.close(max(0.0, deadline - time.monotonic()))
        if self._metrics_server is not None:
            self._metrics_server.shutdown()
            self._metrics_server.server_close()
        log.info("server stopped")

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


ENGINES = ("local", "ray")


def create_server(
    models: Sequence[ServedModel],
    policy: BatchPolicy | None = None,
    settings: ServerSettings | None = None,
    *,
    engine: str = "local",
    ray: RaySettings | None = None,
) -> Server | RayServer:
    """The server of an engine, not started: ``Server`` (``local``) or ``RayServer`` (``ray``).

    Raises:
        UsageError: an unknown engine, or Ray settings for the local engine.
        BackendUnavailableError: ``engine="ray"`` without Ray Serve installed.
    """
    if engine == "local":
        if ray is not None:
            raise UsageError(
                "--engine local | takes no Ray settings (--address, --replicas ...).", hint="pass --engine ray."
            )
        return Server(models, policy, settings)
    if engine != "ray":
        raise UsageError(f"--engine '{engine}' | is not local or ray.", hint="--engine local serves in this process.")
    try:
        from deploykit.serve.ray_engine import RayServer
    except ImportError as exc:
        raise BackendUnavailableError(
            f"ray serve | cannot be imported ({exc}); --engine ray runs the server as a Ray Serve deployment.",
            hint="pip install 'deploykit[serve-ray]' (or use --engine local).",
        ) from exc
    return RayServer(models, policy, settings, ray)


def serve(
    models: Sequence[ServedModel | str],
    policy: BatchPolicy | None = None,
    settings: ServerSettings | None = None,
    *,
    engine: str = "local",
    ray: RaySettings | None = None,
    on_ready: Callable[[Server | RayServer], None] | None = None,
) -> int | None:
    """Serve models over KServe v2 until SIGTERM or SIGINT (the blocking form), then shut down gracefully:
    readiness turns false, requests in flight are answered (within ``shutdown_timeout_s``), the sessions close.

    Args:
        models: ``ServedModel`` values, or paths (``NAME=path`` names one; a bundle folder serves its
            chosen configuration) served on ONNX Runtime.
        policy: dynamic batching and queue bounds (``BatchPolicy()``: batches of up to 8, 2 ms).
        settings: addresses, ports, size bound, token (``ServerSettings()``: 127.0.0.1:8000/8001/8002).
        engine: ``local`` (HTTP, gRPC and metrics from this process) or ``ray`` (the HTTP routes as a
            Ray Serve deployment: replicas behind Ray's proxy, batches by ``@serve.batch``).
        ray: the Ray engine's cluster and replicas (``RaySettings()``: a local Ray, one replica).
        on_ready: called with the started server once the front ends listen (for the local engine,
            before the models are ready), e.g. to print where it listens.

    Returns:
        The signal that stopped the server (``signal.SIGTERM`` or ``signal.SIGINT``). The handlers that
        were in place before are back by then; the caller decides what the signal means for it (the
        command hands it to its own policy and exits 143 or 130, as every command does).
    """
    served = [m if isinstance(m, ServedModel) else ServedModel.from_path(m) for m in models]
    server = create_server(served, policy, settings, engine=engine, ray=ray)
    stop = threading.Event()
    stopped_by: list[int] = []  # the first signal; a second one (timeout -s INT signals the group too) only logs

    def request_stop(signum: int, frame: FrameType | None) -> None:
        log.warning("received %s: shutting down", signal.Signals(signum).name)
        stopped_by.append(signum)
        stop.set()

    previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        server.start()
        for sig in previous:  # ray.init installs a SIGTERM handler of its own that ends the process at once
            signal.signal(sig, request_stop)
        if on_ready is not None:
            on_ready(server)
        while not stop.wait(0.5):
            _refuse_if_nothing_can_serve(server)
    finally:
        server.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return stopped_by[0] if stopped_by else None


def _refuse_if_nothing_can_serve(server: Server | RayServer) -> None:
    """A server none of whose models could load would answer "not ready" forever: it stops, with the reasons.

    Raises:
        ServeError: every model failed to load (a tampered bundle, a backend not installed, an unknown op ...).
    """
    runners = list(getattr(getattr(server, "repository", None), "runners", {}).values())
    if runners and all(runner.state == "unavailable" for runner in runners):
        raise ServeError(
            f"serve | no model can be served, so the server stops instead of answering 'not ready' forever: "
            f"{'; '.join(server.problems())}",
            hint="fix or replace the model (deploykit run MODEL shows the same error), then serve again.",
        )
