"""The frame loop as a pipeline: decode ‖ pre-process ‖ inference ‖ post-process, one thread per stage.

Runtimes, OpenCV and numpy release the GIL in their heavy calls, so the stages overlap and the
throughput approaches the slowest stage's rather than the sum. Stages hand work on through bounded
queues (``QUEUE_SIZE`` items each), so a slow consumer stops the decoder instead of growing memory.
Each stage calls the pipeline's own hooks (``_prepare``, ``_infer``, ``_finish``), the ones its
``__call__`` uses, so a streamed frame gets exactly the answer a single call gives.

Closing the stream (leaving the ``for`` loop, ``close()``, Ctrl-C in the consumer) stops every
stage and releases the source; an error in a stage ends the stream after the frames before it.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from deploykit.validation import check_number
from deploykit.vision.image import TensorRing
from deploykit.vision.sources import DEFAULT_TIMEOUT_S, Frame, Source, open_sources

QUEUE_SIZE = 2
"""Items each queue between two stages holds: enough to keep every stage busy, little enough memory."""
TENSOR_SLOTS = QUEUE_SIZE + 2
"""Input tensors the pre-processing stage reuses in turn: at most one being written, ``QUEUE_SIZE`` queued
for inference and one being read by the runtime are in use at once, so a slot comes round again only
after inference is done with it."""
STAGES = ("decode", "pre", "infer", "post")
_POLL_S = 0.05


@dataclass(frozen=True)
class StageTiming:
    """Milliseconds one frame spent in each stage, and waiting in the queues between them."""

    decode_ms: float
    pre_ms: float
    infer_ms: float
    post_ms: float
    wait_ms: float

    def to_dict(self) -> dict[str, float]:
        return {
            "decode_ms": self.decode_ms,
            "pre_ms": self.pre_ms,
            "infer_ms": self.infer_ms,
            "post_ms": self.post_ms,
            "wait_ms": self.wait_ms,
        }


@dataclass(frozen=True)
class FrameResult:
    """One frame's answer: the frame (its image, index, timestamp, source), the results (``Detection`` or
    ``Classification`` values) and where its time went."""

    frame: Frame
    results: list[Any]
    timing: StageTiming

    def to_dict(self) -> dict[str, Any]:
        """One JSON line: source, frame index, name, timestamp, results, timing (no pixels)."""
        return {
            "source": self.frame.source,
            "frame": self.frame.index,
            "name": self.frame.name,
            "timestamp_s": round(self.frame.timestamp_s, 6),
            "results": [r.to_dict() for r in self.results],
            "timing": {k: round(v, 3) for k, v in self.timing.to_dict().items()},
        }


@dataclass
class StreamStats:
    """What a stream did so far: frames, frames dropped by live sources, wall time, per-stage samples."""

    frames: int = 0
    dropped: int = 0
    wall_s: float = 0.0
    samples_ms: dict[str, list[float]] = field(default_factory=lambda: {s: [] for s in (*STAGES, "wait")})

    def add(self, timing: StageTiming) -> None:
        self.frames += 1
        for name, value in zip((*STAGES, "wait"), timing.to_dict().values(), strict=True):
            self.samples_ms[name].append(value)

    @property
    def fps(self) -> float:
        return self.frames / self.wall_s if self.wall_s > 0 else 0.0

    def stage_sum_ms(self) -> float:
        """The summed time of every stage over every frame: what a sequential loop would have taken."""
        return float(sum(sum(self.samples_ms[s]) for s in STAGES))

    def summary(self) -> dict[str, Any]:
        """FPS, dropped frames, and per stage the mean, p50 and p90 in ms (like ``bench``'s statistics)."""
        stages = {}
        for name, values in self.samples_ms.items():
            if values:
                p50, p90 = (float(v) for v in np.percentile(values, [50, 90]))
                stages[name] = {
                    "mean_ms": round(float(np.mean(values)), 3),
                    "p50_ms": round(p50, 3),
                    "p90_ms": round(p90, 3),
                }
        infer = self.samples_ms["infer"]
        return {
            "frames": self.frames,
            "dropped": self.dropped,
            "wall_s": round(self.wall_s, 3),
            "fps": round(self.fps, 2),
            "inference_only_fps": round(1e3 / float(np.mean(infer)), 2) if infer else 0.0,
            "stages": stages,
        }


class _Work:
    """One frame on its way through the stages."""

    __slots__ = ("frame", "queued_at", "state", "times", "value", "wait_s")

    def __init__(self, frame: Frame, decode_s: float) -> None:
        self.frame = frame
        self.value: Any = frame.image
        self.state: Any = None
        self.times = [decode_s]
        self.queued_at = time.perf_counter()
        self.wait_s = 0.0


class _Failed:
    def __init__(self, error: BaseException) -> None:
        self.error = error


_END = object()


def _put(box: queue.Queue[Any], item: Any, stop: threading.Event) -> bool:
    """Put, waiting while the queue is full (back-pressure); False once the stream is stopping."""
    while not stop.is_set():
        try:
            box.put(item, timeout=_POLL_S)
            return True
        except queue.Full:
            continue
    return False


def _get(box: queue.Queue[Any], stop: threading.Event) -> Any:
    while not stop.is_set():
        try:
            return box.get(timeout=_POLL_S)
        except queue.Empty:
            continue
    return _END


class Stream:
    """Per-frame results of a pipeline on one or more sources, computed by overlapping stages.

    Iterate it (once) for ``FrameResult`` values in frame order; ``stats`` holds the timings so far.
    Use it as a context manager, or call ``close()``, to stop early. ``skip`` maps a source (as given) to
    the names of frames not to run again (what a resumed output already holds).
    """

    def __init__(
        self,
        pipeline: Any,
        sources: Sequence[Source],
        finish: Callable[[Any, Any], list[Any]],
        *,
        max_frames: int | None = None,
        every: int = 1,
        skip: Mapping[str, Collection[str]] | None = None,
    ) -> None:
        check_number("max_frames", max_frames, low=1, integer=True, hint="a positive number of frames, e.g. 100.")
        check_number("every", every, low=1, integer=True, hint="1 takes every frame, 2 every second one ...")
        self.pipeline, self.sources, self._finish = pipeline, list(sources), finish
        self.max_frames, self.every = max_frames, every
        self.skip = dict(skip or {})
        self.stats = StreamStats()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._started = False
        self._ring = TensorRing(TENSOR_SLOTS)

    def __iter__(self) -> Iterator[FrameResult]:
        if self._started:
            raise RuntimeError("a Stream is iterated once")
        self._started = True
        return self._run()

    def _run(self) -> Iterator[FrameResult]:
        boxes: list[queue.Queue[Any]] = [queue.Queue(QUEUE_SIZE) for _ in range(4)]
        steps = [self._prepare, self._infer, self._post]
        self._threads = [threading.Thread(target=self._decode, args=(boxes[0],), name="deploykit-decode", daemon=True)]
        for number, step in enumerate(steps):
            self._threads.append(
                threading.Thread(
                    target=self._stage,
                    args=(step, boxes[number], boxes[number + 1]),
                    name=f"deploykit-{STAGES[number + 1]}",
                    daemon=True,
                )
            )
        start = time.perf_counter()
        for thread in self._threads:
            thread.start()
        try:
            while True:
                item = _get(boxes[-1], self._stop)
                if item is _END:
                    return
                if isinstance(item, _Failed):
                    raise item.error
                result = self._result(item)
                self.stats.wall_s = time.perf_counter() - start
                yield result
        finally:
            self.stats.wall_s = time.perf_counter() - start
            self.close()

    def _prepare(self, image: Any, state: Any) -> tuple[Any, Any]:
        return self.pipeline._prepare(image, self._ring)

    def _infer(self, tensor: Any, state: Any) -> tuple[Any, Any]:
        return self.pipeline._infer(tensor), state

    def _post(self, outputs: Any, state: Any) -> tuple[Any, Any]:
        return self._finish(outputs, state), None

    def _result(self, work: _Work) -> FrameResult:
        work.wait_s += time.perf_counter() - work.queued_at
        decode, pre, infer, post = (t * 1e3 for t in work.times)
        timing = StageTiming(decode, pre, infer, post, work.wait_s * 1e3)
        self.stats.add(timing)
        self.stats.dropped = sum(source.dropped for source in self.sources)
        return FrameResult(work.frame, work.value, timing)

    def _frames(self) -> Iterator[tuple[Frame, float]]:
        """Every ``every``-th frame of each source in turn, up to ``max_frames``, with its decode time. The
        frames of ``skip`` count toward ``max_frames``: a resumed run stops where the whole run would have."""
        taken = sum(len(names) for names in self.skip.values())
        for source in self.sources:
            if self.max_frames is not None and taken >= self.max_frames:
                source.close()
                continue
            done = self.skip.get(source.spec)
            frames = iter(source.frames(skip=done) if done else source.frames())
            try:
                while True:
                    began = time.perf_counter()
                    frame = next(frames, None)
                    if frame is None:
                        break
                    if frame.index % self.every:
                        continue
                    yield frame, time.perf_counter() - began
                    taken += 1
                    if self.max_frames is not None and taken >= self.max_frames:
                        return
            finally:
                close = getattr(frames, "close", None)
                if close is not None:
                    close()
                source.close()

    def _decode(self, outbox: queue.Queue[Any]) -> None:
        try:
            for frame, decode_s in self._frames():
                if self._stop.is_set() or not _put(outbox, _Work(frame, decode_s), self._stop):
                    return
        except BaseException as exc:
            _put(outbox, _Failed(exc), self._stop)
            return
        _put(outbox, _END, self._stop)

    def _stage(self, step: Callable[..., Any], inbox: queue.Queue[Any], outbox: queue.Queue[Any]) -> None:
        while True:
            work = _get(inbox, self._stop)
            if work is _END or isinstance(work, _Failed):
                _put(outbox, work, self._stop)
                return
            work.wait_s += time.perf_counter() - work.queued_at
            began = time.perf_counter()
            try:
                work.value, work.state = step(work.value, work.state)
            except BaseException as exc:
                _put(outbox, _Failed(exc), self._stop)
                return
            work.times.append(time.perf_counter() - began)
            work.queued_at = time.perf_counter()
            if not _put(outbox, work, self._stop):
                return

    def close(self) -> None:
        """Stop every stage and release the sources (waits for the stages to notice, a fraction of a second
        unless a live source is blocked reading: then up to its timeout)."""
        self._stop.set()
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(DEFAULT_TIMEOUT_S)
        for source in self.sources:
            source.close()

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def as_sources(source: Any, timeout_s: float) -> list[Source]:
    """A ``Source``, a list of them, or what users type (paths, globs, folders, camera indices, URLs), opened."""
    if isinstance(source, Source):
        return [source]
    if isinstance(source, (str, int, os.PathLike)):
        return open_sources([source], timeout_s=timeout_s)
    items = list(source)
    if all(isinstance(item, Source) for item in items):
        return items
    return open_sources(items, timeout_s=timeout_s)
