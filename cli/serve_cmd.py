"""``deploykit serve``: models behind the KServe v2 protocol over HTTP and gRPC, until SIGTERM/SIGINT."""

from __future__ import annotations

import logging
import signal
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from deploykit.errors import UsageError
from deploykit.validation import is_bare_number

if TYPE_CHECKING:
    from deploykit.serve.ray_engine import RayServer
    from deploykit.serve.server import Server

from . import options as opt
from .console import coerce, err_console, parse_pairs


def _port(text: str, flag: str) -> int | None:
    if text.strip().lower() in ("none", "off"):
        return None
    try:
        return int(text)
    except ValueError:
        raise UsageError(
            f"{flag} '{text}' | is not a port.", hint="pass a port number, 0 for a free one, or none."
        ) from None


def _port_text(value: str | None) -> str | None:
    """The parser of the port options: a port from 0 to 65535, or none/off; anything else exit 2, naming the flag."""
    if value is None or value.strip().lower() in ("none", "off"):
        return value
    opt.Number(low=0, high=65535, integer=True)(value)
    return value


def _token(path: Path | None) -> str | None:
    if path is None:
        return None
    try:
        token = path.read_text().strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"--token-file '{path}' | cannot be read ({exc}).", hint="pass a readable text file.") from exc
    if not token or any(c.isspace() for c in token):
        raise UsageError(
            f"--token-file '{path}' | holds no token (empty, or whitespace inside).",
            hint="write one token without spaces, e.g. from 'openssl rand -hex 32'.",
        )
    return token


def _queue_delay_ms(value: str | float) -> float:
    """The one duration grammar (``2ms``, ``500us``, ``0``); a bare number other than 0 keeps its documented
    meaning here, milliseconds, with a deprecation line: everywhere else a bare number is seconds."""
    from deploykit.serve.config import MAX_QUEUE_DELAY_MS

    seconds = opt.Duration(allow_zero=True)(value)  # refuses what is no duration, naming the flag
    if isinstance(value, str) and is_bare_number(value) and seconds != 0:
        err_console.print(
            f"warning: --max-queue-delay {value} has no unit and is read as {value} ms, as before; write "
            f"{value}ms (a bare number will mean seconds, as it does in every other option).",
            soft_wrap=True,
            highlight=False,
        )
        delay_ms = float(seconds)
    else:
        delay_ms = float(seconds) * 1e3 if isinstance(value, str) else float(value)
    if delay_ms > MAX_QUEUE_DELAY_MS:  # the same bound as BatchPolicy's, as a usage error in the user's words
        raise typer.BadParameter(
            f"'{value}' is longer than {MAX_QUEUE_DELAY_MS / 1e3:g} s, the longest a batch may wait."
        )
    return delay_ms


def serve(
    models: list[str] = typer.Argument(
        ..., help="The .onnx files or optimize bundle folders to serve; NAME=path names one."
    ),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind (loopback unless --allow-remote)."),
    allow_remote: bool = typer.Option(False, "--allow-remote", help="Allow a --host other machines can reach."),
    http_port: str = typer.Option(
        "8000", "--http-port", parser=_port_text, help="HTTP port (0: a free one; none: no HTTP)."
    ),
    grpc_port: str = typer.Option(
        None,
        "--grpc-port",
        parser=_port_text,
        help="gRPC port (default 8001; 0: a free one; none: no gRPC). Local engine only.",
    ),
    metrics_port: str = typer.Option(
        None,
        "--metrics-port",
        parser=_port_text,
        help="Prometheus port (default 8002; 0: a free one; none: off). Local engine only.",
    ),
    backend: str = typer.Option(
        None, "--backend", "-b", help="Backend name or alias, or BACKEND:DEVICE (default: onnxruntime; a bundle's own)."
    ),
    device: opt.Device = None,
    options: opt.BackendOptions = [],  # noqa: B006  (typer reads the default; never mutated)
    max_batch: int = typer.Option(
        8, "--max-batch", parser=opt.COUNT, help="Rows per forward pass for dynamic-batch models (1: off)."
    ),
    max_queue_delay_ms: float = typer.Option(
        "2ms",
        "--max-queue-delay",
        metavar="DURATION",
        parser=_queue_delay_ms,
        help="How long a batch waits to fill (2ms, 500us, 0).",
    ),
    max_queue: int = typer.Option(256, "--max-queue", parser=opt.COUNT, help="Requests waiting per model before 503."),
    instances: int = typer.Option(1, "--instances", parser=opt.COUNT, help="Sessions per model, run side by side."),
    isolate: bool = typer.Option(
        False, "--isolate", help="Run sessions in worker processes: a crashing backend costs its model only."
    ),
    max_request_size: str = typer.Option("64MB", "--max-request-size", help="Largest request body accepted."),
    token_file: Path = typer.Option(None, "--token-file", help="Require 'Authorization: Bearer TOKEN' (HTTP, gRPC)."),
    shutdown_timeout: float = typer.Option(
        10.0,
        "--shutdown-timeout",
        metavar="DURATION",
        parser=opt.Duration(allow_zero=True),
        help="Time to finish requests on SIGTERM (10s).",
    ),
    reuse_large_buffers: bool = typer.Option(
        True,
        "--reuse-large-buffers/--no-reuse-large-buffers",
        help="Keep freed buffers up to 32 MiB for the next request (glibc mallopt): no fresh pages per body.",
    ),
    engine: str = typer.Option("local", "--engine", help="local (this process) | ray (a Ray Serve deployment)."),
    address: str = typer.Option(
        None, "--address", parser=opt.ray_address, help="--engine ray: cluster to join (default: a local Ray)."
    ),
    replicas: int = typer.Option(
        None, "--replicas", parser=opt.COUNT, help="--engine ray: replicas, each with its own sessions (1)."
    ),
    min_replicas: int = typer.Option(
        None,
        "--min-replicas",
        parser=opt.Number(low=0, high=10**6, integer=True),
        help="--engine ray: autoscaling lower bound.",
    ),
    max_replicas: int = typer.Option(
        None, "--max-replicas", parser=opt.COUNT, help="--engine ray: autoscaling upper bound."
    ),
) -> None:
    """Serve models over the KServe v2 protocol (HTTP and gRPC) with dynamic batching and metrics."""
    from deploykit.serve.config import (
        BatchPolicy,
        RaySettings,
        ServedModel,
        ServerSettings,
        parse_size_bytes,
    )

    if engine not in ("local", "ray"):
        raise UsageError(f"--engine '{engine}' | is not local or ray.", hint="--engine local serves in this process.")
    ray_flags = [
        flag
        for flag, value in (
            ("--address", address),
            ("--replicas", replicas),
            ("--min-replicas", min_replicas),
            ("--max-replicas", max_replicas),
        )
        if value is not None
    ]
    ray = None
    if engine == "local":
        if ray_flags:
            raise UsageError(f"{ray_flags[0]} | belongs to --engine ray.", hint="pass --engine ray, or leave it out.")
        grpc_port, metrics_port = grpc_port or "8001", metrics_port or "8002"
    else:
        for flag, value in (("--grpc-port", grpc_port), ("--metrics-port", metrics_port)):
            if value is not None and value.strip().lower() not in ("none", "off"):
                raise UsageError(
                    f"{flag} {value} | is served by the local engine only; --engine ray serves the v2 HTTP "
                    "routes through Ray Serve's proxy (per-replica counts are in each model's metadata).",
                    hint=f"leave {flag} out with --engine ray, or serve with --engine local.",
                )
        grpc_port = metrics_port = "none"
        ray = RaySettings(address=address, replicas=replicas or 1, min_replicas=min_replicas, max_replicas=max_replicas)

    backend_options = {k: coerce(v) for k, v in parse_pairs(options, "--option").items()}
    backend, device = opt.backend_and_device(backend, device)
    policy = BatchPolicy(max_batch=max_batch, max_queue_delay_ms=max_queue_delay_ms, max_queue=max_queue)
    if _port(http_port, "--http-port") is None and _port(grpc_port, "--grpc-port") is None:
        raise typer.BadParameter(
            "both are none: the server would have no inference endpoint. Keep one of them (8000 and 8001 by "
            "default; 0 picks a free port).",
            param_hint="'--http-port' / '--grpc-port'",
        )
    settings = ServerSettings(
        host=host,
        http_port=_port(http_port, "--http-port"),
        grpc_port=_port(grpc_port, "--grpc-port"),
        metrics_port=_port(metrics_port, "--metrics-port"),
        allow_remote=allow_remote,
        max_request_bytes=parse_size_bytes(max_request_size),
        token=_token(token_file),
        shutdown_timeout_s=shutdown_timeout,
        reuse_large_buffers=reuse_large_buffers,
    )
    served = [
        ServedModel.from_path(
            m, backend=backend, device=device, options=backend_options, instances=instances, isolate=isolate
        )
        for m in models
    ]
    if settings.is_remote:
        err_console.print(
            f"[yellow]warning:[/] binding {host}: other machines can reach this server"
            + ("" if settings.token else " and it asks for no token (--token-file)")
            + ".",
            soft_wrap=True,
        )
    _log_to_stderr()
    from deploykit.serve.server import serve as run_server

    if engine == "ray":
        err_console.print(
            "note: --engine ray serves HTTP only (Ray Serve's proxy); gRPC and the metrics port are the local "
            "engine's and are off.",
            soft_wrap=True,
            highlight=False,
        )
    stopped_by = run_server(served, policy, settings, engine=engine, ray=ray, on_ready=_announce)
    if stopped_by is not None:
        # The server has shut down gracefully; the signal that asked for it now ends the command the way
        # it ends every other one (the handlers of cli/main.py are back): 130 and one line after Ctrl-C,
        # 143 after SIGTERM. Exiting 0 would tell a supervisor or a script that serving ended on its own.
        signal.raise_signal(stopped_by)  # its handler runs before this returns (and raises)
        raise typer.Exit(128 + stopped_by)  # a signal the caller ignores, which serve() still stops on


def _log_to_stderr() -> None:
    logger = logging.getLogger("deploykit.serve")
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("serve: %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False


def _announce(server: Server | RayServer) -> None:
    host = server.settings.host
    parts = [
        f"{kind}={host}:{port}"
        for kind, port in (("http", server.http_port), ("grpc", server.grpc_port), ("metrics", server.metrics_port))
        if port is not None
    ]
    err_console.print("listening: " + " ".join(parts), soft_wrap=True, highlight=False)

    def report() -> None:
        ok = server.wait_ready(server.settings.load_timeout_s + 5)
        if ok:
            err_console.print(f"ready: {len(server.models)} model(s) in {server.startup_s:.2f} s", soft_wrap=True)
            return
        problems = server.problems()
        if len(problems) < len(server.models):  # when none can load, serve stops and says why, once
            for problem in problems:
                err_console.print(f"not ready: {problem}", soft_wrap=True)

    threading.Thread(target=report, name="serve-announce", daemon=True).start()
