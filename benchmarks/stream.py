"""Streaming a 720p video: end-to-end FPS of ``Detector.stream`` next to the inference-only FPS of the
same session, and next to a plain sequential loop (``for frame: detector(frame)``).

The video: 120 frames of 1280×720 panning and zooming over Debian darknet's dog.jpg, written with
cv2.VideoWriter (mp4v). Models: YOLOv4-tiny 416 (models/darknet cfg, random weights, raw heads) and
nudenet's YOLOv8n at 640, as in ``benchmarks/pipeline.py``. Per backend (f32, the runtime's default
threads), in one process, interleaved per round:

- ``inference_only_fps``: ``session.run`` on one pre-processed tensor, back to back;
- ``sequential_fps``: decode and ``detector(frame)`` one frame after the other;
- ``stream_fps``: ``detector.stream(video)``, the four overlapping stages;
- ``fused_stream_fps``: ``detector.stream(video, fused=True)``, pre-processing inside the runtime;
- per-stage mean ms of the stream (decode, pre, infer, post, wait in queues).

Target: ``stream_fps / inference_only_fps`` ≥ 0.9 where the cores allow (a runtime using every core
for inference leaves none for decode/pre/post: say how many cores there were). Prints JSON lines.
Run: ``.venv/bin/python benchmarks/stream.py [--rounds 3] [--frames 120] [--model yolov4]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import cv2

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from pipeline import models  # noqa: E402

import deploykit  # noqa: E402
from tests.assets.videos import pan_zoom_frames, read_video, write_video  # noqa: E402

BACKENDS = (("onnxruntime", {}), ("openvino", {"precision": "f32"}))


def _inference_only_fps(detector: deploykit.Detector, frame, calls: int) -> float:
    tensor, _ = detector._prepare(frame)
    detector._infer(tensor)
    start = time.perf_counter()
    for _ in range(calls):
        detector._infer(tensor)
    return calls / (time.perf_counter() - start)


def _sequential_fps(detector: deploykit.Detector, video: Path) -> float:
    start = time.perf_counter()
    capture = cv2.VideoCapture(str(video), cv2.CAP_FFMPEG)
    frames = 0
    while True:
        ok, frame = capture.read()
        if not ok:
            break
        detector(frame)
        frames += 1
    capture.release()
    return frames / (time.perf_counter() - start)


def _stream(detector: deploykit.Detector, video: Path, fused: bool = False) -> dict:
    stream = detector.stream(video, fused=fused)
    for _ in stream:
        pass
    return stream.stats.summary()


def run(rounds: int, frames: int, only: str) -> Iterator[dict]:
    with tempfile.TemporaryDirectory() as directory:
        folder = Path(directory)
        photo = cv2.imread("/usr/share/darknet/data/dog.jpg")
        video = write_video(folder / "dog-720p.mp4", pan_zoom_frames(photo, frames))
        first = read_video(video)[0]
        for name, path, extra in models(folder):
            if only not in name:
                continue
            for backend, options in BACKENDS:
                with deploykit.Detector(path, backend, conf=0.25, **extra, **options) as detector:
                    _stream(detector, video)  # warm-up: caches, thread pools
                    _stream(detector, video, fused=True)
                    measured: dict[str, list] = {"inference_only_fps": [], "sequential_fps": [], "stream": [],
                                                 "fused": []}  # fmt: skip
                    for _ in range(rounds):
                        measured["inference_only_fps"].append(_inference_only_fps(detector, first, frames))
                        measured["sequential_fps"].append(_sequential_fps(detector, video))
                        measured["stream"].append(_stream(detector, video))
                        measured["fused"].append(_stream(detector, video, fused=True))
                    yield _line(name, backend, detector, measured, rounds, frames)


def _stage_means(summaries: list[dict], stages: tuple[str, ...]) -> dict[str, float]:
    return {stage: round(statistics.median(s["stages"][stage]["mean_ms"] for s in summaries), 2) for stage in stages}


def _line(name: str, backend: str, detector: deploykit.Detector, measured: dict, rounds: int, frames: int) -> dict:
    inference = statistics.median(measured["inference_only_fps"])
    stream_fps = statistics.median(s["fps"] for s in measured["stream"])
    stages = _stage_means(measured["stream"], ("decode", "pre", "infer", "post", "wait"))
    return {
        "benchmark": "stream", "model": name, "backend": backend, "ran": detector.session.info.backend,
        "video": f"{frames} frames 1280x720 mp4v", "rounds": rounds, "cpus": os.cpu_count(),
        "load": os.getloadavg()[0], "inference_only_fps": round(inference, 1),
        "sequential_fps": round(statistics.median(measured["sequential_fps"]), 1), "stream_fps": round(stream_fps, 1),
        "fused_stream_fps": round(statistics.median(s["fps"] for s in measured["fused"]), 1),
        "stream_over_inference": round(stream_fps / inference, 3), "target": 0.9, "stage_mean_ms": stages,
        "fused_stage_mean_ms": _stage_means(measured["fused"], ("pre", "infer")),
    }  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--frames", type=int, default=120)
    parser.add_argument("--model", default="", help="only models whose name holds this, e.g. yolov4")
    arguments = parser.parse_args()
    for line in run(arguments.rounds, arguments.frames, arguments.model):
        print(json.dumps(line), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
