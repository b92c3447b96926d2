"""One served model: its sessions, its request queue and the dynamic batcher.

Requests arrive already checked against the model's inputs (``protocol``). Each session has one
thread that takes the oldest request and, for a model whose batch axis (axis 0 of every input and
output) is dynamic, lets later requests with the same other dimensions join it, up to
``max_batch`` rows or until the first has waited ``max_queue_delay_ms``; one forward pass runs the
concatenation and the outputs are split back per request. Sessions run in this process unless the
model is ``isolate``d (``worker``). A session that ends unexpectedly (a worker crashed) marks the
model not ready; the other models are not touched.
"""

from __future__ import annotations

import collections
import itertools
import logging
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from deploykit.errors import DeployKitError, InputError, ModelUnavailableError, RequestError
from deploykit.serve.config import BatchPolicy, ServedModel
from deploykit.serve.metrics import ModelMetrics
from deploykit.serve.protocol import InputCheck
from deploykit.tensors import TensorSpec

log = logging.getLogger("deploykit.serve")
#: A model whose forward pass typically takes less (microseconds) may run on the HTTP front end's event loop
#: when a session is free and nothing waits (``ModelRunner.quick_for``, ``run_now``): the loop is held no longer
#: than decoding a large JSON body holds it, and the request skips two thread hand-offs (benchmarks/serve.py).
QUICK_INFER_US = 1000.0
#: ...and a request whose inputs are more than this many times as large as the passes' typical inputs runs on the
#: runner's thread however quick the model: with a dynamic dimension a pass takes as long as its inputs are large,
#: and one request of 64 MiB would hold every other connection of the loop for its whole pass.
QUICK_INPUT_FACTOR = 2.0


class SessionLike(Protocol):
    inputs: dict[str, TensorSpec]
    outputs: dict[str, TensorSpec]
    metadata: dict[str, str]
    info: Any

    def run(self, feeds: Any) -> dict[str, np.ndarray]: ...

    def close(self) -> None: ...


@dataclass
class _Pending:
    feeds: dict[str, np.ndarray]
    rows: int
    key: tuple[tuple[int, ...], ...]
    arrived: float
    future: Future[dict[str, np.ndarray]] = field(default_factory=Future)


def open_in_process(model: ServedModel) -> SessionLike:
    from deploykit.sessions import load

    session: SessionLike = load(model.source, model.backend, model.device, **dict(model.options))
    return session


class ModelRunner:
    """Sessions, queue and batcher of one served model.

    ``start`` loads the sessions in the background; ``submit`` queues checked feeds and returns a
    future of the outputs; ``close`` stops taking requests, lets the queue drain (bounded) and
    closes the sessions.
    """

    def __init__(
        self,
        model: ServedModel,
        policy: BatchPolicy,
        metrics: ModelMetrics,
        open_session: Callable[[ServedModel], SessionLike] = open_in_process,
    ) -> None:
        self.model = model
        self.policy = policy
        self.metrics = metrics
        self._open_session = open_session
        interface = model.interface()
        self.inputs: dict[str, TensorSpec] = {s.name: s for s in interface.inputs}
        self.outputs: dict[str, TensorSpec] = {s.name: s for s in interface.outputs}
        self.metadata: dict[str, str] = dict(interface.metadata_props)
        self.precision: str | None = model.precision
        self.checks = {name: InputCheck(spec) for name, spec in self.inputs.items()}
        self.batchable = policy.max_batch > 1 and _batch_axis_dynamic(self.inputs, self.outputs)
        self.problem: str | None = None
        self.info: Any = None
        self._sessions: list[SessionLike] = []
        self._threads: list[threading.Thread] = []
        self._queue: collections.deque[_Pending] = collections.deque()
        self._state = threading.Condition()
        self._ready = False
        self._stopping = False
        self._stop_reason = "the server is shutting down"
        self._closed = False
        self._running = 0
        self._free = threading.Semaphore(model.instances)  # sessions not running a batch right now
        self._turn = itertools.count()
        self.typical_infer_us: float | None = None  # a moving average of the forward passes' times
        self.typical_input_bytes: float | None = None  # ... and of the sizes of their inputs
        self.metrics.ready.set(0)

    @property
    def ready(self) -> bool:
        return self._ready and not self._stopping

    @property
    def state(self) -> str:
        """``loading``, ``ready``, ``unavailable`` (with ``problem``), ``stopping`` or ``closed``."""
        if self._closed:
            return "closed"
        if self._stopping:
            return "stopping"
        if self._ready:
            return "ready"
        return "unavailable" if self.problem else "loading"

    def start(self) -> None:
        """Open the sessions in the background, one thread each; the model is ready when all are open.

        The thread that opens a session serves it until the runner closes: a worker process started
        by a thread gets its death signal when that thread ends (``worker``), so it must live on.
        """
        for index in range(self.model.instances):
            thread = threading.Thread(
                target=self._instance, args=(index,), name=f"serve-{self.model.name}-{index}", daemon=True
            )
            thread.start()
            self._threads.append(thread)

    def _instance(self, index: int) -> None:
        try:
            session = self._open_session(self.model)
            _check_servable(self.model.name, session)
        except BaseException as exc:
            self._fail(exc, "while loading")
            return
        with self._state:
            self._sessions.append(session)
            if len(self._sessions) == self.model.instances and not self._stopping and not self.problem:
                self._opened(self._sessions[0])
        try:
            self._serve(session)
        finally:
            try:
                session.close()
            except Exception as exc:  # a session that fails to close must not keep the others open
                log.warning("model '%s': closing a session failed: %s", self.model.name, exc)

    def _opened(self, first: SessionLike) -> None:
        """Every session is open: take the interface the runtime reports, and start taking requests."""
        self.inputs, self.outputs, self.metadata = dict(first.inputs), dict(first.outputs), dict(first.metadata)
        self.checks = {name: InputCheck(spec) for name, spec in self.inputs.items()}
        self.batchable = self.policy.max_batch > 1 and _batch_axis_dynamic(self.inputs, self.outputs)
        self.info = first.info
        self.precision = self.model.precision or getattr(first.info, "precision", None)
        self._ready = True
        self._state.notify_all()
        self.metrics.ready.set(1)
        log.info("model '%s' ready on %s (%s)", self.model.name, getattr(first.info, "backend", "?"), self.precision)

    def _fail(self, exc: BaseException, when: str) -> None:
        text = str(exc) if isinstance(exc, DeployKitError) else f"{type(exc).__name__}: {exc}"
        with self._state:
            self.problem = text
            self._ready = False
            dropped = list(self._queue)
            self._queue.clear()
            self._state.notify_all()
        self.metrics.ready.set(0)
        self.metrics.pending.set(0)
        log.error("model '%s' is not ready %s: %s", self.model.name, when, text)
        error = ModelUnavailableError(f"model '{self.model.name}' | is not ready: {text}")
        for pending in dropped:
            pending.future.set_exception(error)

    def submit(self, feeds: dict[str, np.ndarray]) -> Future[dict[str, np.ndarray]]:
        """Queue checked feeds; the future gives the outputs (all of them, by name).

        Raises:
            ModelUnavailableError: the model is not ready or its queue is full.
        """
        rows = _rows(feeds) if self.batchable else 1
        key = tuple(array.shape[1:] for array in feeds.values()) if self.batchable else ()
        pending = _Pending(feeds, rows, key, time.perf_counter())
        with self._state:
            if not self.ready:
                raise self._unavailable()
            if len(self._queue) >= self.policy.max_queue:
                raise ModelUnavailableError(
                    f"model '{self.model.name}' | its queue is full "
                    f"({self.policy.max_queue} waiting, the --max-queue bound).",
                    hint="retry later, or serve more --instances.",
                )
            self._queue.append(pending)
            self.metrics.pending.set(len(self._queue))
            self._state.notify()
        return pending.future

    def run_now(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray] | None:
        """Answer in the caller's thread when batching has nothing to gain (a fixed-batch model, nothing
        queued, a session free): two thread hand-offs fewer per request. None: ``submit`` instead.

        For callers that may block (the gRPC front end's worker threads), not for an event loop.
        """
        if self.batchable or not self._free.acquire(blocking=False):
            return None
        try:
            with self._state:
                if not self.ready or self._queue:
                    return None
                self._running += 1
            try:
                pending = _Pending(feeds, 1, (), time.perf_counter())
                self._run(self._sessions[next(self._turn) % len(self._sessions)], [pending])
                return pending.future.result()
            finally:
                with self._state:
                    self._running -= 1
                    self._state.notify_all()
        finally:
            self._free.release()

    def quick_for(self, feeds: dict[str, np.ndarray]) -> bool:
        """Whether the pass for ``feeds`` may run on an event loop's thread: the model's forward passes typically
        take under ``QUICK_INFER_US`` (the two thread hand-offs of ``submit`` cost about as much) and ``feeds`` are
        at most ``QUICK_INPUT_FACTOR`` times as large as their inputs typically are. False before any pass, and
        always for a model isolated in worker processes (a worker that hangs must not hold the loop)."""
        typical_us, typical_bytes = self.typical_infer_us, self.typical_input_bytes
        if typical_us is None or typical_bytes is None or typical_us >= QUICK_INFER_US or self.model.isolate:
            return False
        return _input_bytes(feeds) <= QUICK_INPUT_FACTOR * typical_bytes

    def _unavailable(self) -> ModelUnavailableError:
        if self._stopping:
            return ModelUnavailableError(f"model '{self.model.name}' | {self._stop_reason}.")
        if self.problem:
            return ModelUnavailableError(f"model '{self.model.name}' | is not ready: {self.problem}")
        return ModelUnavailableError(
            f"model '{self.model.name}' | is still loading.", hint="wait until GET /v2/models/NAME/ready says 200."
        )

    def _take(self) -> list[_Pending] | None:
        """The next batch, or None when the runner stops, the queue is empty and no pass runs: a pass that
        ``run_now`` runs on its caller's thread uses a session this thread would close on its way out."""
        with self._state:
            while not (self._queue and self._ready):  # a stopping runner still drains its queue
                if self.problem or (self._stopping and not self._running):
                    return None
                self._state.wait()
            first = self._queue.popleft()
            batch, rows = [first], first.rows
            if self.batchable:
                deadline = first.arrived + self.policy.max_queue_delay_ms / 1e3
                while rows < self.policy.max_batch:
                    joined = self._join(first, batch, rows)
                    if joined:
                        rows += joined
                        continue
                    remaining = deadline - time.perf_counter()
                    if remaining <= 0 or self._stopping:
                        break
                    self._state.wait(remaining)
            self._running += 1
            self.metrics.pending.set(len(self._queue))
            return batch

    def _join(self, first: _Pending, batch: list[_Pending], rows: int) -> int:
        for index, pending in enumerate(self._queue):
            if pending.key == first.key and rows + pending.rows <= self.policy.max_batch:
                del self._queue[index]
                batch.append(pending)
                return pending.rows
        return 0

    def _serve(self, session: SessionLike) -> None:
        while True:
            batch = self._take()
            if batch is None:
                return
            try:
                with self._free:
                    self._run(session, batch)
            finally:
                with self._state:
                    self._running -= 1
                    self._state.notify_all()

    def _run(self, session: SessionLike, batch: list[_Pending]) -> None:
        started = time.perf_counter()
        feeds = (
            batch[0].feeds
            if len(batch) == 1
            else {name: np.concatenate([p.feeds[name] for p in batch]) for name in batch[0].feeds}
        )
        joined = time.perf_counter()
        try:
            outputs = session.run(feeds)
        except ModelUnavailableError as exc:  # the worker process ended: the model is gone
            for pending in batch:
                pending.future.set_exception(exc)
            self._fail(exc, "after its backend crashed")
            return
        except BaseException as exc:
            error = RequestError(str(exc)) if isinstance(exc, InputError) else exc
            for pending in batch:
                pending.future.set_exception(error)
            return
        computed = time.perf_counter()
        parts: list[dict[str, np.ndarray]] = []
        offset = 0
        for pending in batch:
            if len(batch) == 1:
                parts.append(outputs)
            else:
                parts.append({name: array[offset : offset + pending.rows] for name, array in outputs.items()})
            offset += pending.rows
        split = time.perf_counter()
        input_us, infer_us, output_us = (joined - started) * 1e6, (computed - joined) * 1e6, (split - computed) * 1e6
        self.typical_infer_us = _moving_average(self.typical_infer_us, infer_us)
        self.typical_input_bytes = _moving_average(self.typical_input_bytes, _input_bytes(feeds))
        self.metrics.executed(sum(p.rows for p in batch), input_us, infer_us, output_us)
        for pending, part in zip(batch, parts, strict=True):
            queued_us = (started - pending.arrived) * 1e6
            self.metrics.queue_us.inc(queued_us)
            self.metrics.queue_histogram.observe(queued_us)
            self.metrics.compute_input_us.inc(input_us)
            self.metrics.compute_us.inc(infer_us)
            self.metrics.compute_output_us.inc(output_us)
            pending.future.set_result(part)

    def close(self, timeout_s: float, reason: str | None = None) -> None:
        """Refuse new requests (saying ``reason``), answer the queued ones within ``timeout_s``, close the
        sessions."""
        deadline = time.monotonic() + timeout_s
        with self._state:
            if reason is not None and not self._stopping:
                self._stop_reason = reason
            self._stopping = True
            self._state.notify_all()
            while (self._queue or self._running) and self._ready and time.monotonic() < deadline:
                self._state.wait(max(0.0, min(0.1, deadline - time.monotonic())))
            dropped = list(self._queue)
            self._queue.clear()
        error = ModelUnavailableError(f"model '{self.model.name}' | was not run: {self._stop_reason}.")
        for pending in dropped:
            pending.future.set_exception(error)
        for thread in self._threads:  # each closes its session once its last batch is answered
            thread.join(timeout=max(0.0, deadline - time.monotonic()) + 5.0)
        self.metrics.ready.set(0)
        self._closed = True

    def describe(self) -> dict[str, Any]:
        """State for logs and the model metadata's parameters."""
        return {
            "state": self.state,
            "problem": self.problem,
            "backend": getattr(self.info, "backend", self.model.backend),
            "device": getattr(self.info, "device", self.model.device),
            "precision": self.precision,
            "verdict": self.model.verdict,
            "options": dict(getattr(self.info, "options", None) or self.model.options),
            "instances": self.model.instances,
            "dynamic_batching": self.batchable,
            "max_batch": self.policy.max_batch if self.batchable else 1,
            "queued": len(self._queue),
            "running": self._running,
        }


def _check_servable(name: str, session: SessionLike) -> None:
    """The v2 protocol carries tensors: a sequence or optional input or output is refused at load, by name."""
    from deploykit.errors import UnsupportedModelError
    from deploykit.tensors import TENSOR

    others = [f"{s.name} ({s.kind})" for s in [*session.inputs.values(), *session.outputs.values()] if s.kind != TENSOR]
    if others:
        raise UnsupportedModelError(
            f"model '{name}' | has values the KServe v2 protocol cannot carry: {', '.join(others)}; it sends tensors.",
            hint="serve a model whose inputs and outputs are tensors, or run it in-process with deploykit.load.",
        )


def _batch_axis_dynamic(inputs: Mapping[str, TensorSpec], outputs: Mapping[str, TensorSpec]) -> bool:
    specs = [*inputs.values(), *outputs.values()]
    return bool(specs) and all(
        s.shape is not None and len(s.shape) > 0 and not isinstance(s.shape[0], int) for s in specs
    )


def _rows(feeds: Mapping[str, np.ndarray]) -> int:
    sizes = {array.shape[0] for array in feeds.values()}
    if len(sizes) != 1:
        raise RequestError(
            f"request | inputs disagree on the batch size (axis 0): {sorted(sizes)}.",
            hint="send the same number of rows in every input.",
        )
    return sizes.pop()


def _input_bytes(feeds: Mapping[str, np.ndarray]) -> int:
    return sum(array.nbytes for array in feeds.values())


def _moving_average(average: float | None, value: float) -> float:
    return value if average is None else average + (value - average) / 8
