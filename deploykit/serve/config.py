"""What ``deploykit serve`` serves and how: frozen values built once at the edge and passed whole.

``ServedModel`` describes one model (file, backend, device, options, how many sessions, whether
they run in worker processes); ``BatchPolicy`` the dynamic batching and queue bounds;
``ServerSettings`` the addresses, size bounds and token. Each has ``to_dict``/``from_dict``.
This module reads model files only through ``deploykit.model``; it must not import a runtime.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from deploykit.backends.registry import DEFAULT_BACKEND
from deploykit.errors import UsageError
from deploykit.model import Model, check_model_path
from deploykit.validation import is_bare_number, parse_duration

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
LOOPBACK = ("127.0.0.1", "localhost", "::1")


def is_model_name(text: str) -> bool:
    """Whether ``text`` is a protocol model name: letters, digits, ``_ . -``, no path separator."""
    return bool(_NAME.match(text))


@dataclass(frozen=True)
class ServedModel:
    """One served model: what the ``/v2/models/{name}`` routes answer for.

    Attributes:
        name: the model's name in the protocol (default: the file name without ``.onnx``).
        path: the ``.onnx`` file.
        backend: registered backend name or alias.
        device: the backend's device; None for its default.
        options: backend options (``-O KEY=VALUE``).
        version: the one version served (the protocol's versions are strings).
        instances: sessions opened for this model; requests (or batches) run on them side by side.
        isolate: run each session in its own worker process, so a backend that crashes marks this
            model not ready instead of ending the server.
        precision: the precision the model was verified in, when known (a bundle says it).
        verdict: the verification verdict, when known (``pass``, ``fail`` ...).
        bundle: the ``optimize`` bundle folder this model comes from: its sessions open through
            ``open_bundle`` (the model's SHA-256 checked, the chosen backend, device, precision, threads).
    """

    name: str
    path: Path
    backend: str = DEFAULT_BACKEND
    device: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    version: str = "1"
    instances: int = 1
    isolate: bool = False
    precision: str | None = None
    verdict: str | None = None
    bundle: Path | None = None

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise UsageError(
                f"model name '{self.name}' | is not a protocol model name.",
                hint="use letters, digits, '_', '.' or '-' (at most 128), starting with a letter or digit.",
            )
        if self.instances < 1:
            raise UsageError(
                f"model '{self.name}' | asks for {self.instances} instances, expected 1 or more.",
                hint="pass --instances 1 or more.",
            )

    @classmethod
    def from_path(
        cls,
        path: str | os.PathLike[str],
        *,
        name: str | None = None,
        backend: str | None = None,
        device: str | None = None,
        options: Mapping[str, Any] | None = None,
        instances: int = 1,
        isolate: bool = False,
    ) -> ServedModel:
        """The served model for a path: an ``.onnx`` file or an ``optimize`` bundle folder, or
        ``NAME=path`` to name it (default: the file name without ``.onnx``, the bundle's folder name).

        A bundle serves the configuration it chose (backend, device, precision, threads) and says its
        verdict; ``backend``, ``device`` and ``options`` may only repeat what it chose.

        Raises:
            ModelNotFoundError: the path names neither a file nor a folder.
            BundleError: the folder is not a readable bundle.
            UsageError: the name is not a protocol model name; another backend or option than a bundle's.
        """
        text = os.fspath(path)
        if name is None and "=" in text and not Path(text).exists():
            name, _, text = text.partition("=")
        if os.path.isdir(text):
            return cls._from_bundle(Path(text), name, backend, device, options or {}, instances, isolate)
        model_path = check_model_path(text)
        backend = backend or DEFAULT_BACKEND
        return cls(
            name=name or model_path.stem,
            path=model_path,
            backend=backend,
            device=device,
            options=dict(options or {}),
            instances=instances,
            isolate=isolate,
        )

    @classmethod
    def _from_bundle(
        cls,
        folder: Path,
        name: str | None,
        backend: str | None,
        device: str | None,
        options: Mapping[str, Any],
        instances: int,
        isolate: bool,
    ) -> ServedModel:
        from deploykit.optimize.bundle import chosen_options, read_bundle

        bundle = read_bundle(folder, verify=False)  # the sessions check the SHA-256 while they load
        manifest = bundle.manifest
        verdict = manifest.verdict or {}
        return cls(
            name=name or folder.resolve().name,
            path=bundle.model_path,
            backend=manifest.backend,
            device=manifest.device,
            options=chosen_options(bundle, backend, device, options),
            instances=instances,
            isolate=isolate,
            precision=manifest.precision,
            verdict=verdict.get("status"),
            bundle=folder,
        )

    @property
    def source(self) -> Path:
        """What a session opens: the bundle folder, or the model file."""
        return self.bundle or self.path

    def interface(self) -> Model:
        """The model's inputs, outputs and metadata as its backend reads them without loading it: an ONNX
        file's graph, or the ``.json`` beside a converted file (a bundle's ``.tflite`` or ``.mnn``).

        Raises:
            ModelNotFoundError, InvalidModelError: the file cannot be read.
            UnsupportedModelError: a file in a runtime's own format whose interface only its runtime knows.
        """
        from deploykit.backends.registry import canonical_name, get_backend
        from deploykit.errors import UnsupportedModelError

        model = get_backend(canonical_name(self.backend)).read_model(self.path)
        if model.format != ".onnx" and not model.inputs:
            raise UnsupportedModelError(
                f"model '{self.path.name}' | its inputs and outputs are known only once {self.backend} loads it, "
                "and serve answers for them before.",
                hint="serve the .onnx model, or put the .json its export wrote beside the file.",
            )
        return model

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["path"] = str(self.path)
        data["options"] = dict(self.options)
        data["bundle"] = None if self.bundle is None else str(self.bundle)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ServedModel:
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        bundle = known.get("bundle")
        return cls(**{**known, "path": Path(known["path"]), "bundle": None if bundle is None else Path(bundle)})


#: The longest the first request of a batch may wait for others (``--max-queue-delay``).
MAX_QUEUE_DELAY_MS = 10_000.0


@dataclass(frozen=True)
class BatchPolicy:
    """Dynamic batching and the queue bound, per model.

    Attributes:
        max_batch: at most this many rows (batch entries) run in one forward pass; 1 turns batching off.
        max_queue_delay_ms: how long the first request of a batch waits for others to join it.
        max_queue: requests waiting per model; one more is refused as unavailable.
    """

    max_batch: int = 8
    max_queue_delay_ms: float = 2.0
    max_queue: int = 256

    def __post_init__(self) -> None:
        if self.max_batch < 1:
            raise UsageError(f"--max-batch {self.max_batch} | expected 1 or more.", hint="e.g. --max-batch 8.")
        if not 0 <= self.max_queue_delay_ms <= MAX_QUEUE_DELAY_MS:
            raise UsageError(
                f"--max-queue-delay {self.max_queue_delay_ms:g}ms | expected 0 to {MAX_QUEUE_DELAY_MS:g} ms.",
                hint="e.g. --max-queue-delay 2ms.",
            )
        if self.max_queue < 1:
            raise UsageError(f"--max-queue {self.max_queue} | expected 1 or more.", hint="e.g. --max-queue 256.")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BatchPolicy:
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})


@dataclass(frozen=True)
class ServerSettings:
    """Where the server listens and what it accepts.

    Attributes:
        host: the address all three ports bind; loopback unless ``allow_remote``.
        http_port, grpc_port, metrics_port: 0 picks a free port; None turns that endpoint off.
        allow_remote: bind a non-loopback ``host`` (the CLI's ``--allow-remote``), with a warning.
        max_request_bytes: the largest request body (HTTP) or message (gRPC) accepted.
        token: a bearer token every HTTP and gRPC request must carry; None for none.
        shutdown_timeout_s: how long a shutdown waits for requests in flight.
        load_timeout_s: how long an isolated worker may take to load its model.
        reuse_large_buffers: keep freed buffers of up to 32 MiB for the next request (glibc's
            ``mallopt``; process-wide, see ``deploykit.serve.memory``): each request's body then lands
            in warm pages instead of freshly faulted ones. The CLI turns it on; off by default for an
            app that embeds the server, whose process it would change.
    """

    host: str = "127.0.0.1"
    http_port: int | None = 8000
    grpc_port: int | None = 8001
    metrics_port: int | None = 8002
    allow_remote: bool = False
    max_request_bytes: int = 64 * 1024 * 1024
    token: str | None = field(default=None, repr=False)
    shutdown_timeout_s: float = 10.0
    load_timeout_s: float = 300.0
    reuse_large_buffers: bool = False

    def __post_init__(self) -> None:
        if self.host not in LOOPBACK and not self.allow_remote:
            raise UsageError(
                f"--host {self.host} | is not a loopback address; the server would accept other machines.",
                hint="pass --allow-remote as well to bind it on purpose (and consider --token-file).",
            )
        for flag, port in (
            ("--http-port", self.http_port),
            ("--grpc-port", self.grpc_port),
            ("--metrics-port", self.metrics_port),
        ):
            if port is not None and not 0 <= port <= 65535:
                raise UsageError(f"{flag} {port} | expected a port from 0 to 65535.", hint="0 picks a free port.")
        self._refuse_a_port_given_twice()
        if self.max_request_bytes < 1024:
            raise UsageError(
                f"--max-request-size {self.max_request_bytes} | expected at least 1024 bytes.",
                hint="e.g. --max-request-size 64MB.",
            )

    def _refuse_a_port_given_twice(self) -> None:
        """Two endpoints on one port: the second bind would fail as if another process held it."""
        flags = {"--http-port": self.http_port, "--grpc-port": self.grpc_port, "--metrics-port": self.metrics_port}
        taken: dict[int, str] = {}
        for flag, port in flags.items():
            if port:  # 0 picks a free port for each, and None is no endpoint
                if port in taken:
                    raise UsageError(
                        f"{flag} {port} | is also given to {taken[port]}; each endpoint needs its own port.",
                        hint=f"pass another port to {flag}, or 0 for a free one.",
                    )
                taken[port] = flag

    @property
    def is_remote(self) -> bool:
        return self.host not in LOOPBACK

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["token"] = None if self.token is None else "<set>"
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ServerSettings:
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})


@dataclass(frozen=True)
class RaySettings:
    """Where and how wide the Ray engine (``--engine ray``) serves.

    Attributes:
        address: the cluster to join (``auto``, ``HOST:6379``, ``ray://HOST:10001``); None starts a
            local Ray for the server (and shuts it down after).
        replicas: replicas of the deployment, each with its own sessions (the initial count when
            autoscaling).
        min_replicas, max_replicas: autoscaling bounds; both None for a fixed ``replicas``.
        replica_cpus: the CPUs Ray reserves for one replica (scheduling, not a thread limit).
        health_check_period_s: how often Ray Serve checks each replica (a dead one, or one whose
            backend crashed, is replaced after the next check); Ray's default is 10 s.
    """

    address: str | None = None
    replicas: int = 1
    min_replicas: int | None = None
    max_replicas: int | None = None
    replica_cpus: float = 1.0
    health_check_period_s: float = 10.0

    def __post_init__(self) -> None:
        if self.replicas < 1:
            raise UsageError(f"--replicas {self.replicas} | expected 1 or more.", hint="e.g. --replicas 2.")
        if (self.min_replicas is None) != (self.max_replicas is None):
            raise UsageError(
                "--min-replicas/--max-replicas | only one of the autoscaling bounds was given.",
                hint="pass both (e.g. --min-replicas 1 --max-replicas 4), or neither for a fixed --replicas.",
            )
        if self.min_replicas is not None and self.max_replicas is not None:
            if not 0 <= self.min_replicas <= self.replicas <= self.max_replicas or self.max_replicas < 1:
                raise UsageError(
                    f"--min-replicas {self.min_replicas} --replicas {self.replicas} --max-replicas "
                    f"{self.max_replicas} | expected 0 <= min <= replicas <= max and max >= 1.",
                    hint="e.g. --min-replicas 1 --replicas 2 --max-replicas 4.",
                )
        if self.replica_cpus < 0:
            raise UsageError(f"replica_cpus {self.replica_cpus:g} | expected 0 or more.", hint="e.g. 1.")
        if self.health_check_period_s <= 0:
            raise UsageError(
                f"health_check_period_s {self.health_check_period_s:g} | expected more than 0.", hint="e.g. 10."
            )

    @property
    def autoscaling(self) -> bool:
        return self.min_replicas is not None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RaySettings:
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})


def parse_duration_ms(text: str) -> float:
    """``2ms``, ``500us``, ``0.01s`` (the one duration grammar, ``validation.parse_duration``) → milliseconds.
    A bare number keeps its old meaning here, milliseconds (``--max-queue-delay`` documented it so); the
    command says it is deprecated."""
    if is_bare_number(text):
        return float(text)
    return parse_duration(text, name="--max-queue-delay", allow_zero=True) * 1e3


def parse_size_bytes(text: str) -> int:
    """``64MB``, ``512KB``, ``1GB`` or a bare number of bytes → bytes (powers of 1024)."""
    match = re.fullmatch(r"\s*([0-9]+)\s*(B|KB|KiB|MB|MiB|GB|GiB)?\s*", text, flags=re.IGNORECASE)
    if not match:
        raise UsageError(f"--max-request-size '{text}' | is not a size.", hint="write e.g. 64MB or 512KB.")
    unit = (match.group(2) or "B").upper().replace("I", "")
    return int(match.group(1)) * {"B": 1, "KB": 1024, "MB": 1024**2, "GB": 1024**3}[unit]
