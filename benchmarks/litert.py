"""LiteRT's f32, f16 and dynamic-range INT8 files beside ONNX Runtime f32, ratios within one run.

Builds MobileNetV2 (the recipe, ImageNet weights) and the official YOLOv4-tiny (COCO weights), exports
each with ``deploykit export litert`` once per ``--weights`` (each verified against the reference
evaluator on the Darknet sample photos: element-wise for f32, top-1 agreement / mAP for f16 and int8),
then times ONNX Runtime f32 on the ``.onnx`` and LiteRT on each ``.tflite`` in the same process,
interleaved: every round runs each configuration for ``--iterations`` calls after a warm-up, at 1 and 2
threads. Prints one JSON line per configuration: the median over rounds of the p50 (ms) and of the ratio
to ONNX Runtime f32 at the same threads in the same round (below 1 is faster), and ``cat /proc/loadavg``
before and after. Needs the converter environment (``deploykit converters add litert``).

Run: ``.venv/bin/python benchmarks/litert.py [--models mobilenet_v2,yolov4-tiny] [--weights f32,int8]
[--rounds 5] [--iterations 30]``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import deploykit
from deploykit.bench.fingerprint import cpu_info

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo, for tests.assets
from tests.assets.paths import darknet_image, official_darknet

WEIGHTS = ("f32", "f16", "int8")


def _p50_ms(session: deploykit.Session, feeds: dict[str, np.ndarray], iterations: int) -> float:
    for _ in range(3):
        session.run(feeds)
    times = []
    for _ in range(iterations):
        started = time.perf_counter()
        session.run(feeds)
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def _model(name: str, directory: Path) -> Path:
    from deploykit.convert.darknet.convert import convert_darknet
    from deploykit.recipes import build

    path = directory / f"{name}.onnx"
    if name == "yolov4-tiny":
        cfg, weights, names = official_darknet("yolov4-tiny")
        convert_darknet(cfg, weights, path, labels=names, verify_backends=[])
    else:
        build(name, path, verify_backends=[])
    return path


def _loadavg() -> str:
    return Path("/proc/loadavg").read_text().strip()


def _time(name: str, model: Path, files: dict[str, Path], rounds: int, iterations: int) -> None:
    spec = next(iter(deploykit.load(model, backend="onnxruntime").inputs.values()))
    shape = tuple(d if isinstance(d, int) and d > 0 else 1 for d in spec.shape or ())
    feeds = {spec.name: np.random.default_rng(0).random(shape, dtype=np.float32)}
    for threads in (1, 2):
        sessions = {"onnxruntime f32": deploykit.load(model, backend="onnxruntime", threads=threads)}
        for weights, path in files.items():
            sessions[f"litert {weights}"] = deploykit.load(path, backend="litert", threads=threads)
        measured = [{key: _p50_ms(session, feeds, iterations) for key, session in sessions.items()}
                    for _ in range(rounds)]  # fmt: skip
        for key in sessions:
            print(json.dumps({
                "model": name,
                "configuration": f"{key}, {threads} thread(s)",
                "p50_ms": round(statistics.median(r[key] for r in measured), 2),
                "vs_ort_f32": round(statistics.median(r[key] / r["onnxruntime f32"] for r in measured), 2),
                "rounds": len(measured),
            }), flush=True)  # fmt: skip
        for session in sessions.values():
            session.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--models", default="mobilenet_v2,yolov4-tiny")
    parser.add_argument("--weights", default=",".join(WEIGHTS))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=30)
    args = parser.parse_args()
    from deploykit.export_litert import export_litert

    print(json.dumps({"cpu": cpu_info().get("model"), "rounds": args.rounds, "iterations": args.iterations,
                      "loadavg": _loadavg()}), flush=True)  # fmt: skip
    with tempfile.TemporaryDirectory() as scratch:
        directory = Path(scratch)
        photos = directory / "photos"
        photos.mkdir()
        for name in ("dog.jpg", "eagle.jpg", "horses.jpg", "person.jpg"):
            shutil.copy(darknet_image(name), photos / name)
        for name in args.models.split(","):
            model = _model(name, directory)
            files = {}
            for weights in args.weights.split(","):
                started = time.perf_counter()
                done = export_litert(model, directory / f"{name}-{weights}.tflite", weights=weights, images=photos)
                files[weights] = done.tflite
                print(json.dumps({"model": name, "export": weights, "seconds": round(time.perf_counter() - started, 1),
                                  "verdicts": [v.describe() for v in done.verdicts]}), flush=True)  # fmt: skip
            _time(name, model, files, args.rounds, args.iterations)
    print(json.dumps({"loadavg": _loadavg()}), flush=True)


if __name__ == "__main__":
    main()
