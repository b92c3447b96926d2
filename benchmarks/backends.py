"""Every backend at every precision it runs here, on three real models, with ratios within one run.

Models: MobileNetV2 (the recipe, ImageNet weights), the official YOLOv4-tiny (COCO weights) and
nudenet's YOLOv8n (an Ultralytics export, 320×320). Each round is one ``deploykit.benchmark`` call
over every available backend × device × precision (each configuration in its own worker process,
verified against onnx's reference evaluator on real photos in the first round: f32 element-wise,
reduced precision by the task metric); rounds alternate so that load on a shared machine hits every
configuration alike. Per configuration the median over rounds of the p50 latency, the spread
(min–max of the rounds' p50) and ``vs_ort_f32``: its p50 over ONNX Runtime f32's p50 in the same
round, median over rounds (below 1 is faster). Prints one JSON line per configuration.

Run: ``.venv/bin/python benchmarks/backends.py [--rounds 3] [--iterations 30] [--threads N]``. On a CPU that
other processes share, set ``OMP_WAIT_POLICY=PASSIVE``: ncnn's OpenMP threads otherwise spin at every
layer's barrier while the other thread is descheduled (10× slower under load here); it is printed.
x86 figures do not predict ARM ones: ncnn's fp16/bf16 kernels and its NEON code paths are what it
is built for, and none of them run here.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import deploykit
from deploykit.bench.fingerprint import cpu_info

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo, for tests.assets
from tests.assets.paths import darknet_image, nudenet_model, official_darknet, yolov4_detector_photo

PRECISIONS = "f32,bf16,f16"
PHOTOS = ("dog.jpg", "eagle.jpg", "horses.jpg", "person.jpg")


def _models(directory: Path) -> dict[str, Path]:
    from deploykit.convert.darknet.convert import convert_darknet
    from deploykit.recipes import build

    mobilenet = directory / "mobilenet_v2.onnx"
    build("mobilenet_v2", mobilenet, verify_backends=[])
    cfg, weights, names = official_darknet("yolov4-tiny")
    yolov4 = directory / "yolov4-tiny.onnx"
    convert_darknet(cfg, weights, yolov4, labels=names, verify_backends=[])
    return {"mobilenet_v2": mobilenet, "yolov4-tiny": yolov4, "yolov8n (nudenet)": nudenet_model()}


def _photos(directory: Path) -> Path:
    folder = directory / "photos"
    folder.mkdir()
    for name in PHOTOS:
        shutil.copy(darknet_image(name), folder / name)
    shutil.copy(yolov4_detector_photo("bus.jpg"), folder / "bus.jpg")
    return folder


def _key(row: Any) -> str:
    return f"{row.config.backend}:{row.device} {row.precision}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument("--threads", type=int, default=None, help="threads for every backend (default: each one's own)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        directory = Path(scratch)
        photos = _photos(directory)
        print(json.dumps({"cpu": cpu_info().get("model"), "rounds": args.rounds, "iterations": args.iterations,
                          "threads": args.threads or "each backend's default",
                          "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "unset")}))  # fmt: skip
        for model_name, model in _models(directory).items():
            rounds: list[dict[str, Any]] = []
            verdicts: dict[str, str] = {}
            notes: list[str] = []
            for index in range(args.rounds):
                report = deploykit.benchmark(
                    model,
                    deploykit.BenchPlan(
                        precision=PRECISIONS,
                        iterations=args.iterations,
                        warmup=5,
                        threads=args.threads,
                        oracle="auto" if index == 0 else "none",
                    ),
                    inputs=photos,
                )
                rows = {_key(r): r for r in report.ok_rows() if r.latency is not None}
                rounds.append(rows)
                if index == 0:
                    verdicts = {k: (r.verdict.status if r.verdict else "unverified") for k, r in rows.items()}
                    notes = [n for n in report.notes if "not supported here" in n]
                    notes += [f"{r.label}: {r.error}" for r in report.rows if not r.ok]
            baseline = "onnxruntime:cpu f32"
            for key in rounds[0]:
                p50s = [r[key].latency.p50_ms for r in rounds if key in r]
                both = [r for r in rounds if key in r and baseline in r]
                ratios = [r[key].latency.p50_ms / r[baseline].latency.p50_ms for r in both]
                print(json.dumps({
                    "model": model_name, "configuration": key, "verdict": verdicts.get(key),
                    "p50_ms": round(statistics.median(p50s), 2),
                    "p50_spread_ms": [round(min(p50s), 2), round(max(p50s), 2)],
                    "vs_ort_f32": round(statistics.median(ratios), 2) if ratios else None,
                    "rounds": len(p50s),
                }))  # fmt: skip
            if notes:
                print(json.dumps({"model": model_name, "notes": notes}))


if __name__ == "__main__":
    main()
