"""``deploykit serve --engine ray``: the same v2 HTTP app as a Ray Serve deployment.

Each replica (``V2Replica``) holds a ``Repository`` of its own, with its own sessions, and serves
the ASGI app of ``http.create_app`` over it through ``@serve.ingress``: routes, request parsing,
validation and error forms are the local server's code. Only how a checked request reaches a
session differs: requests to a dynamic-batch model go through ``@serve.batch`` (at most
``max_batch`` rows, waiting at most ``max_queue_delay_ms``), whose batch runs as one forward pass
on the replica's runner. Ray's own HTTP proxy routes requests to the replicas; gRPC and the
Prometheus port are the local engine's (the server says so when they are asked for).

This module imports Ray Serve at the top: import it only through ``load_engine``, which turns a
missing Ray Serve into a ``BackendUnavailableError`` naming the extra.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from ray import serve

from deploykit.errors import ServeError, UsageError
from deploykit.serve.config import BatchPolicy, RaySettings, ServedModel, ServerSettings
from deploykit.serve.metrics import ServerMetrics
from deploykit.serve.repository import Repository, check_names
from deploykit.serve.runner import ModelRunner

log = logging.getLogger("deploykit.serve")
APP_NAME = "deploykit"
DEPLOYMENT_NAME = "deploykit-v2"
Feeds = dict[str, np.ndarray]


@dataclass
class _Request:
    """One request handed to ``@serve.batch``: requests of one model and one row shape share a pass."""

    runner: ModelRunner
    feeds: Feeds
    rows: int

    @property
    def group(self) -> tuple[Any, ...]:
        return (self.runner.model.name, *((name, array.shape[1:]) for name, array in sorted(self.feeds.items())))


def _batch_rows(requests: list[_Request]) -> int:
    return sum(r.rows for r in requests)


class V2Replica:
    """One replica: the served models' sessions and the v2 app over them.

    Args:
        models: ``ServedModel.to_dict`` of each model (the files must be at these paths on the replica's node).
        policy: ``BatchPolicy.to_dict``; ``@serve.batch`` takes its batch size and delay, the runner its queue bound.
        settings: ``ServerSettings.to_dict`` with the token in clear (the replica checks it).
    """

    def __init__(self, models: Sequence[dict[str, Any]], policy: dict[str, Any], settings: dict[str, Any]) -> None:
        self.policy = BatchPolicy.from_dict(policy)
        self.settings = ServerSettings.from_dict(settings)
        served = [ServedModel.from_dict(m) for m in models]
        # @serve.batch forms the batches; the runner runs each at once (no second wait)
        inner = BatchPolicy(max_batch=self.policy.max_batch, max_queue_delay_ms=0.0, max_queue=self.policy.max_queue)
        from deploykit.serve.shared_memory import SharedMemoryRegions

        # a region registered through the proxy would reach one replica, maybe on another machine
        regions = SharedMemoryRegions(False, "--engine ray spreads requests over replicas")
        self.repository = Repository(
            served, inner, ServerMetrics(), load_timeout_s=self.settings.load_timeout_s, shared_memory=regions
        )
        self.repository.engine_parameters = {"engine": "ray", "replica": _replica_id()}
        # a load through the proxy would reach one replica; the others would keep serving the old set
        self.repository.control_refusal = "--engine ray routes each request to one of its replicas"
        if self.settings.reuse_large_buffers:
            from deploykit.serve.memory import reuse_large_buffers

            log.info("%s", reuse_large_buffers())
        self.repository.start()
        deadline = time.monotonic() + self.settings.load_timeout_s
        runners = list(self.repository.runners.values())
        while any(r.state == "loading" for r in runners) and time.monotonic() < deadline:
            time.sleep(0.02)
        failed = [f"model '{r.model.name}': {r.problem or r.state}" for r in runners if not r.ready]
        if failed:
            self.repository.close(0)
            raise ServeError(
                f"replica | cannot serve: {'; '.join(failed)}", hint="serve it with --engine local to see why."
            )
        batched: Any = self._batched  # @serve.batch's setters: its size and wait come from the policy
        batched.set_max_batch_size(self.policy.max_batch)
        batched.set_batch_wait_timeout_s(self.policy.max_queue_delay_ms / 1e3)

    def __serve_build_asgi_app__(self) -> Any:
        from deploykit.serve.http import create_app

        return create_app(
            self.repository,
            token=self.settings.token,
            max_request_bytes=self.settings.max_request_bytes,
            submit=self._submit,
        )

    async def _submit(self, runner: ModelRunner, feeds: Feeds) -> Feeds:
        rows = next(iter(feeds.values())).shape[0] if feeds and runner.batchable else self.policy.max_batch
        if runner.batchable and rows < self.policy.max_batch:
            answer = await self._batched(_Request(runner, feeds, rows))
            if isinstance(answer, BaseException):
                raise answer
            return answer
        # a fixed-batch model, or a request that fills a batch alone: straight to the runner
        return await asyncio.wrap_future(runner.submit(feeds))

    @serve.batch(max_batch_size=8, batch_wait_timeout_s=0.002, batch_size_fn=_batch_rows)
    async def _batched(self, requests: list[_Request]) -> list[Feeds | BaseException]:
        """One forward pass per model and row shape in the batch; the outputs split back per request."""
        groups: dict[tuple[Any, ...], list[int]] = {}
        for index, request in enumerate(requests):
            groups.setdefault(request.group, []).append(index)
        answers: list[Feeds | BaseException] = [ServeError("request | was not run.")] * len(requests)

        async def run(indices: list[int]) -> None:
            members = [requests[i] for i in indices]
            feeds = (
                members[0].feeds
                if len(members) == 1
                else {name: np.concatenate([m.feeds[name] for m in members]) for name in members[0].feeds}
            )
            try:
                outputs = await asyncio.wrap_future(members[0].runner.submit(feeds))
            except Exception as exc:
                for i in indices:
                    answers[i] = exc
                return
            offset = 0
            for i, member in zip(indices, members, strict=True):
                answers[i] = {name: array[offset : offset + member.rows] for name, array in outputs.items()}
                offset += member.rows

        await asyncio.gather(*(run(indices) for indices in groups.values()))
        return answers

    def check_health(self) -> None:
        """Ray Serve's health check: a model whose backend crashed makes Ray replace this replica."""
        broken = [f"model '{r.model.name}': {r.problem}" for r in self.repository.runners.values() if r.problem]
        if broken:
            raise ServeError(f"replica | {'; '.join(broken)}")

    def __del__(self) -> None:
        repository = getattr(self, "repository", None)
        if repository is not None:
            repository.close(self.settings.shutdown_timeout_s)


def _replica_id() -> str:
    try:
        return str(serve.get_replica_context().replica_id.unique_id)
    except Exception:  # outside a replica (a direct construction): the process says who it is
        return f"pid-{os.getpid()}"


def _free_port(host: str) -> int:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class RayServer:
    """The v2 HTTP app on Ray Serve: ``start`` deploys it (and returns once every replica is ready),
    ``stop`` deletes it (and shuts down the Ray this server started).

    Attributes:
        http_port: the port of Ray's HTTP proxy; ``grpc_port`` and ``metrics_port`` are always None.
        notes: what the local engine would have done that this one does not (gRPC, metrics port).
    """

    def __init__(
        self,
        models: Sequence[ServedModel],
        policy: BatchPolicy | None = None,
        settings: ServerSettings | None = None,
        ray: RaySettings | None = None,
    ) -> None:
        self.models = list(models)
        self.policy = policy or BatchPolicy()
        self.settings = settings or ServerSettings()
        self.ray = ray or RaySettings()
        if self.settings.http_port is None:
            raise UsageError(
                "--engine ray | serves the v2 HTTP routes, and --http-port is none.",
                hint="pass an --http-port (0 picks a free one), or use --engine local for gRPC only.",
            )
        check_names(self.models)
        self.notes: list[str] = []
        if self.settings.grpc_port is not None:
            self.notes.append(f"gRPC (port {self.settings.grpc_port}) is served by the local engine only; off here")
        if self.settings.metrics_port is not None:
            self.notes.append(
                f"the Prometheus port ({self.settings.metrics_port}) is the local engine's; off here "
                "(per-replica counts are in each model's metadata; Ray exports Serve's own metrics)"
            )
        self.http_port: int | None = None
        self.grpc_port: int | None = None
        self.metrics_port: int | None = None
        self._stop_ray: Callable[[], None] | None = None  # set when this server started the Ray it runs on
        self._started_at = 0.0
        self._ready_after_s: float | None = None
        self._stopped = False

    def start(self) -> RayServer:
        """Connect to Ray (or start a local one), start Serve's proxy and deploy; returns when ready.

        Raises:
            BackendError: the cluster cannot be reached. ServeError: a replica failed to start.
        """
        import ray

        from deploykit.distributed.cluster import start as start_ray

        for note in self.notes:
            log.warning("--engine ray: %s", note)
        self._started_at = time.perf_counter()
        self._stop_ray = start_ray(ray, self.ray.address)
        port = self.settings.http_port or _free_port(self.settings.host)
        try:
            serve.start(http_options={"host": self.settings.host, "port": port})
            serve.run(self.application(), name=APP_NAME, route_prefix="/")
        except Exception as exc:
            self.stop()
            text = str(exc).strip().splitlines()
            raise ServeError(
                f"ray serve | the deployment did not start: {text[-1] if text else type(exc).__name__}",
                hint="run the same models with --engine local to see why, or check 'ray status'.",
            ) from exc
        self.http_port = port
        self._ready_after_s = time.perf_counter() - self._started_at
        return self

    def application(self) -> Any:
        """The bound Ray Serve application (for ``serve.run`` or a Serve config of your own)."""
        options: dict[str, Any] = {
            "name": DEPLOYMENT_NAME,
            "ray_actor_options": {"num_cpus": self.ray.replica_cpus},
            # room for a full batch queued behind the one running, beyond it Ray's router queues
            "max_ongoing_requests": max(4 * self.policy.max_batch, 16),
            "logging_config": {"enable_access_log": False},
            "health_check_period_s": self.ray.health_check_period_s,
        }
        if self.ray.autoscaling:
            options["autoscaling_config"] = {
                "min_replicas": self.ray.min_replicas,
                "max_replicas": self.ray.max_replicas,
                "initial_replicas": self.ray.replicas,
            }
        else:
            options["num_replicas"] = self.ray.replicas
        deployment: Any = serve.deployment(serve.ingress()(V2Replica), **options)
        settings = {**self.settings.to_dict(), "token": self.settings.token}
        return deployment.bind([m.to_dict() for m in self.models], self.policy.to_dict(), settings)

    @property
    def ready(self) -> bool:
        if self.http_port is None or self._stopped:
            return False
        application = serve.status().applications.get(APP_NAME)
        return application is not None and str(application.status) in ("RUNNING", "ApplicationStatus.RUNNING")

    def wait_ready(self, timeout_s: float = 60.0) -> bool:
        """Ready once ``start`` returned (Serve reports the application running)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.ready:
                return True
            time.sleep(0.1)
        return False

    @property
    def startup_s(self) -> float:
        return self._ready_after_s if self._ready_after_s is not None else time.perf_counter() - self._started_at

    def problems(self) -> list[str]:
        """Why the server is not ready, for the CLI."""
        application = serve.status().applications.get(APP_NAME)
        return [f"ray serve application '{APP_NAME}': {application.status if application else 'not deployed'}"]

    def stop(self, timeout_s: float | None = None) -> None:
        """Delete the application; shut Serve and Ray down when this server started Ray. Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        import ray

        if not ray.is_initialized():  # the start failed before connecting: Serve's calls would connect ("auto")
            return
        try:
            if self._stop_ray is not None:
                serve.shutdown()
            else:
                serve.delete(APP_NAME)
        except Exception as exc:  # a stop must not hide why the start failed, nor leave Ray running
            log.warning("ray serve | stopping the application failed: %s", exc)
        finally:
            if self._stop_ray is not None:
                self._stop_ray()
        log.info("ray serve application stopped")

    def __enter__(self) -> RayServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
