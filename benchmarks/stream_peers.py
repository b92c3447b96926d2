"""``Detector.stream`` beside Ultralytics' ``YOLO(model).predict(video, stream=True)`` (``stream.py --peers``).

The same ONNX file (nudenet's YOLOv8n, exported by Ultralytics, dynamic input) and the same 720p video.
Ultralytics runs in a virtual environment this script creates under deploykit's cache
(``bench-peers/ultralytics``, the helper ``serve.py --peers`` uses): PyPI's torch with its matching
torchvision (CUDA builds that run on the CPU: PyPI's torchvision is a CUDA build whose C ops do not
load beside the CPU-only torch wheel) and this environment's onnxruntime, so ONNX Runtime's CPU provider
runs the network on both sides. Ultralytics' default call letterboxes a 1280×720 frame to 640×384
(``imgsz=640``, ``rect`` on a dynamic model); deploykit is given the same input size, and the same
thresholds (conf 0.25, IoU 0.7, 300 boxes), so both run the same tensor through the same runtime.

Ultralytics stays in one resident worker process (loaded and warmed up once); deploykit's detectors stay
open in this process. Each round runs every candidate once over the whole video, the order rotating.
The worker blocks and records every network attempt (an audit hook on socket and urllib events) and
runs with ``YOLO_OFFLINE=1``, settings ``sync`` off and its settings folder inside its environment
(without ``YOLO_OFFLINE`` its import resolves two DNS names to decide whether it is online).

With the same backend and the same tensor, inference costs both sides the same, and a frame can leave
no faster than its inference: deploykit can at most hide what Ultralytics' loop spends around inference.
The ``same_backend_ceiling`` line gives that bound (Ultralytics' ms per frame over its inference ms).
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import cv2
from serve_peers import peer_environment

import deploykit

PACKAGES = ["ultralytics==8.4.190", "torch==2.14.1", "torchvision==0.29.1", "onnx==1.23.2"]
INPUT_SIZE = (384, 640)  # (height, width): what Ultralytics' default call makes of a 1280x720 frame
PEER = "ultralytics predict(stream=True) onnxruntime f32"
CONF, IOU, MAX_DETECTIONS = 0.25, 0.7, 300  # Ultralytics' predict defaults

WORKER = r"""
import json, sys, time

ATTEMPTS = []


def _no_network(event, args):
    if event in ("socket.connect", "socket.getaddrinfo", "urllib.Request", "http.client.connect"):
        ATTEMPTS.append(f"{event} {str(args)[:120]}")
        raise OSError(f"network blocked by the benchmark: {event}")


sys.addaudithook(_no_network)

import cv2
import onnxruntime
import torch
import torchvision
import ultralytics
from ultralytics import YOLO, settings

settings.update({"sync": False})
torchvision.ops.nms(torch.rand(3, 4), torch.rand(3), 0.5)  # the C op Ultralytics' NMS needs
model_path, video = sys.argv[1], sys.argv[2]
model = YOLO(model_path, task="detect")
arguments = {"stream": True, "verbose": False, "device": "cpu", "imgsz": 640, "conf": 0.25, "iou": 0.7,
             "max_det": 300}


def one_pass():
    frames = boxes = 0
    speed = {"preprocess": 0.0, "inference": 0.0, "postprocess": 0.0}
    started = time.perf_counter()
    for result in model.predict(video, **arguments):
        frames += 1
        boxes += len(result.boxes)
        for key in speed:
            speed[key] += result.speed[key]
    seconds = time.perf_counter() - started
    return {"frames": frames, "seconds": seconds, "fps": frames / seconds, "boxes": boxes,
            "stage_mean_ms": {k: v / max(frames, 1) for k, v in speed.items()}}


one_pass()  # warm-up: the predictor, the session, the letterbox shapes
capture = cv2.VideoCapture(video)
ok, frame = capture.read()
capture.release()
shape = list(model.predictor.preprocess([frame]).shape)
print(json.dumps({"ready": True, "ultralytics": ultralytics.__version__, "torch": torch.__version__,
                  "torchvision": torchvision.__version__, "onnxruntime": onnxruntime.__version__,
                  "providers": model.predictor.model.session.get_providers(), "input_shape": shape,
                  "torch_threads": torch.get_num_threads(), "network_attempts": ATTEMPTS}), flush=True)
for line in sys.stdin:
    if line.strip() != "run":
        break
    print(json.dumps({**one_pass(), "network_attempts": len(ATTEMPTS)}), flush=True)
"""


class UltralyticsWorker:
    """The resident Ultralytics process: ``run()`` is one timed pass over the video."""

    def __init__(self, model: Path, video: Path, folder: Path) -> None:
        python = peer_environment("ultralytics", PACKAGES)
        script = folder / "ultralytics_worker.py"
        script.write_text(WORKER)
        config = python.parents[1] / "yolo-config"
        config.mkdir(exist_ok=True)
        environment = {**os.environ, "YOLO_OFFLINE": "1", "YOLO_CONFIG_DIR": str(config), "YOLO_VERBOSE": "False"}
        self.log = folder / "ultralytics.log"
        self.process = subprocess.Popen([str(python), str(script), str(model), str(video)], cwd=folder, env=environment,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=open(self.log, "wb"),
                                        text=True)  # fmt: skip
        self.ready = self._answer()

    def _answer(self) -> dict:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise SystemExit(f"Ultralytics worker exited with {self.process.wait()}:\n{self.log.read_text()[-3000:]}")
        return json.loads(line)

    def run(self) -> dict:
        assert self.process.stdin is not None
        self.process.stdin.write("run\n")
        self.process.stdin.flush()
        return self._answer()

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.wait(timeout=60)


def _stream_pass(detector: deploykit.Detector, video: Path) -> dict:
    """One ``stream()`` pass timed from opening the video to the last result, as the worker times Ultralytics'."""
    started = time.perf_counter()
    stream = detector.stream(video)
    boxes = sum(len(result.results) for result in stream)
    seconds = time.perf_counter() - started
    summary = stream.stats.summary()
    stages = {stage: summary["stages"][stage]["mean_ms"] for stage in ("decode", "pre", "infer", "post", "wait")}
    return {"frames": summary["frames"], "fps": summary["frames"] / seconds, "boxes": boxes, "stage_mean_ms": stages}


def _sequential_pass(detector: deploykit.Detector, video: Path) -> dict:
    """Decode and ``detector(frame)`` one frame after the other: the per-frame work without the pipeline."""
    started = time.perf_counter()
    capture = cv2.VideoCapture(str(video), cv2.CAP_FFMPEG)
    frames = boxes = 0
    totals = {"pre": 0.0, "infer": 0.0, "post": 0.0}
    while True:
        ok, frame = capture.read()
        if not ok:
            break
        boxes += len(detector(frame))
        frames += 1
        for stage in totals:
            totals[stage] += getattr(detector.last_timing, f"{stage}_ms")
    capture.release()
    seconds = time.perf_counter() - started
    stages = {stage: total / max(frames, 1) for stage, total in totals.items()}
    return {"frames": frames, "fps": frames / seconds, "boxes": boxes, "stage_mean_ms": stages}


Candidate = tuple[deploykit.Detector, Callable[[deploykit.Detector, Path], dict]]


def _candidates(model: Path, int8: Path | None) -> dict[str, Candidate]:
    """deploykit's side: ONNX Runtime f32 streamed and in a plain loop, OpenVINO INT8 streamed."""
    overrides = deploykit.PreprocessOverrides(input_size=INPUT_SIZE)
    f32 = deploykit.Detector(
        model, "onnxruntime", preprocess=overrides, conf=CONF, iou=IOU, max_detections=MAX_DETECTIONS
    )
    candidates: dict[str, Candidate] = {
        "deploykit onnxruntime f32 stream()": (f32, _stream_pass),
        "deploykit onnxruntime f32 sequential loop": (f32, _sequential_pass),
    }
    if int8 is not None:
        int8_detector = deploykit.Detector(
            int8, "openvino", precision="f32", preprocess=overrides, conf=CONF, iou=IOU, max_detections=MAX_DETECTIONS
        )
        candidates["deploykit openvino int8 stream()"] = (int8_detector, _stream_pass)
    return candidates


def peers(model: Path, int8: Path | None, video: Path, folder: Path, rounds: int,
          emit: Callable[[dict], None]) -> None:  # fmt: skip
    """The rounds (every candidate once per round, the order rotating), then one line per candidate."""
    worker = UltralyticsWorker(model, video, folder)
    candidates = _candidates(model, int8)
    try:
        emit({"benchmark": "stream-peers", "peer_environment": worker.ready})
        for detector, one_pass in candidates.values():
            one_pass(detector, video)  # warm-up, as the worker's
        passes: dict[str, list[dict]] = {PEER: [], **{name: [] for name in candidates}}
        names = list(passes)
        for round_index in range(rounds):
            shift = round_index % len(names)
            for name in names[shift:] + names[:shift]:
                if name == PEER:
                    passes[name].append(worker.run())
                else:
                    detector, one_pass = candidates[name]
                    passes[name].append(one_pass(detector, video))
    finally:
        worker.close()
        for detector, _ in candidates.values():
            detector.close()
    for line in _lines(passes, {name: detector for name, (detector, _) in candidates.items()}, rounds):
        emit(line)


def _lines(passes: dict[str, list[dict]], detectors: dict[str, deploykit.Detector], rounds: int) -> Iterator[dict]:
    peer = statistics.median(p["fps"] for p in passes[PEER])
    peer_inference_ms = statistics.median(p["stage_mean_ms"]["inference"] for p in passes[PEER])
    yield {
        "benchmark": "stream-peers", "candidate": PEER, "note": "ceiling with the same backend",
        "frame_ms": round(1e3 / peer, 2), "inference_ms": round(peer_inference_ms, 2),
        "same_backend_ceiling": round(1e3 / peer / peer_inference_ms, 3),
    }  # fmt: skip
    for name, runs in passes.items():
        fps = statistics.median(p["fps"] for p in runs)
        by_round = [round(p["fps"] / u["fps"], 2) for p, u in zip(runs, passes[PEER], strict=True)]
        stages = {k: round(statistics.median(p["stage_mean_ms"][k] for p in runs), 2) for k in runs[0]["stage_mean_ms"]}
        attempts = max(p.get("network_attempts", 0) for p in runs)
        ran = f"ultralytics -> onnxruntime CPUExecutionProvider, {attempts} network attempts"
        if name in detectors:
            info = detectors[name].session.info
            ran = f"{info.backend} {info.device} {info.precision} (model {info.model_precision})"
        yield {
            "benchmark": "stream-peers", "candidate": name, "ran": ran, "rounds": rounds,
            "frames": runs[0]["frames"], "fps_median": round(fps, 2), "fps_rounds": [round(p["fps"], 2) for p in runs],
            "over_ultralytics": round(fps / peer, 2), "target_same_backend": 1.5,
            "over_ultralytics_by_round": by_round, "over_ultralytics_by_round_median": statistics.median(by_round),
            "boxes_per_pass": runs[0]["boxes"], "stage_mean_ms": stages,
            "load_average_1min": round(os.getloadavg()[0], 2), "cpus": os.cpu_count(), "cpu": _cpu_model(),
            "input": f"{INPUT_SIZE[1]}x{INPUT_SIZE[0]}",
        }  # fmt: skip


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()
