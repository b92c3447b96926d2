"""Batch inference throughput: ``predict --engine ray`` with 1 and 2 actors against ``--engine local``.

The same 210 real photos (resized copies of Debian darknet's samples, 7 × 30 sizes) through the same
YOLOv8n (nudenet's 320n.onnx) on ONNX Runtime. Throughput is rows per second from the first image
read to the last row written; Ray's start-up (``ray.init`` of a local instance) is reported
separately, as is the end-to-end time with it. Target: 2 actors × 1 CPU ≥ 0.9× local.
Prints one JSON line. Run: ``.venv/bin/python benchmarks/ray_predict.py``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import tempfile
from pathlib import Path

from deploykit.bench.fingerprint import cpu_info
from deploykit.distributed import Execution, predict

PHOTOS = Path("/usr/share/darknet/data")
NAMES = ("dog", "eagle", "giraffe", "horses", "kite", "person", "scream")


def _inputs(folder: Path) -> Path:
    import cv2

    spec = importlib.util.find_spec("nudenet")
    model = Path(next(iter(spec.submodule_search_locations))) / "320n.onnx" if spec else None
    if model is None or not model.is_file() or not all((PHOTOS / f"{n}.jpg").is_file() for n in NAMES):
        sys.exit("needs nudenet (pip install --no-deps nudenet) and Debian's darknet photos (apt-get install darknet)")
    for name in NAMES:
        image = cv2.imread(str(PHOTOS / f"{name}.jpg"))
        for index in range(30):
            scale = 0.25 + 0.025 * index
            cv2.imwrite(str(folder / f"{name}_{index:02d}.jpg"), cv2.resize(image, None, fx=scale, fy=scale))
    return model


def main() -> None:
    load_before = round(os.getloadavg()[0], 2)  # other work on the machine skews every figure: say how much
    with tempfile.TemporaryDirectory() as scratch:
        images = Path(scratch) / "images"
        images.mkdir()
        model = _inputs(images)
        runs = {}
        for label, engine, actors in (("local", "local", None), ("ray_1_actor", "ray", 1), ("ray_2_actors", "ray", 2)):
            summary = predict(
                model,
                images,
                Path(scratch) / label,
                execution=Execution(engine=engine, actors=actors, cpus_per_actor=1),
            )
            runs[label] = {
                "images": summary.processed,
                "images_per_s": round(summary.images_per_s, 2),
                "elapsed_s": round(summary.elapsed_s, 2),
                "ray_startup_s": round(summary.startup_s, 2),
                "end_to_end_images_per_s": round(summary.processed / (summary.elapsed_s + summary.startup_s), 2),
            }
    local = runs["local"]["images_per_s"]
    print(
        json.dumps(
            {
                "benchmark": "ray_predict",
                "model": "nudenet 320n.onnx (YOLOv8n 320x320), onnxruntime",
                "cpus": os.cpu_count(),
                "cpu": cpu_info()["model"],
                "load_average_1m_before_after": [load_before, round(os.getloadavg()[0], 2)],
                **runs,
                "ratio_ray_1_actor_vs_local": round(runs["ray_1_actor"]["images_per_s"] / local, 2),
                "ratio_ray_2_actors_vs_local": round(runs["ray_2_actors"]["images_per_s"] / local, 2),
                "target_ray_2_actors_vs_local": 0.9,
            }
        )
    )


if __name__ == "__main__":
    main()
