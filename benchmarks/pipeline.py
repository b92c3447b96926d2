"""Pre- and post-processing cost of the Detector next to inference, and NMS on 10 000 boxes.

1. A 1280×720 image into a 416×416 YOLOv4-tiny (converted from models/darknet, random weights, raw
   heads decoded in numpy) and into a 640×640 Ultralytics-layout YOLOv8n (nudenet's, dynamic input
   run at 640). Median pre / infer / post over N calls on each backend (f32). Target: pre + post
   ≤ 15% of the best backend's inference.
2. NMS on 10 000 random candidate boxes, 80 classes. Target ≤ 1 ms.
3. Stage by stage on real weights and photos, next to OpenVINO INT8 inference (``pipeline_stages.py``:
   YOLOv4-tiny with the official Darknet weights, Darknet's photos at 1280×720; before and now).
Prints one JSON line each. Run: ``.venv/bin/python benchmarks/pipeline.py [--stage-rounds 20]``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

import deploykit  # noqa: E402
from deploykit.vision.nms import nms  # noqa: E402


def models(directory: Path) -> list[tuple[str, Path, dict]]:
    from deploykit.convert.darknet.convert import DarknetExportSettings, convert_darknet, load_network
    from deploykit.convert.darknet.weights import write_random_weights

    cfg = REPO / "models" / "darknet" / "yolov4-tiny.cfg"
    weights = directory / "yolov4-tiny.weights"
    write_random_weights(load_network(cfg), weights, seed=0)
    tiny = directory / "yolov4-tiny.onnx"
    convert_darknet(cfg, weights, tiny, verify_backends=[], export=DarknetExportSettings(head="raw"))
    found = [("yolov4-tiny 416 (darknet raw heads)", tiny, {})]
    yolov8n = nudenet_yolov8n()
    if yolov8n is not None:
        found.append(
            (
                "yolov8n 640 (ultralytics layout)",
                yolov8n,
                {"preprocess": deploykit.PreprocessOverrides(input_size=(640, 640))},
            )
        )
    return found


def nudenet_yolov8n() -> Path | None:
    """The YOLOv8n ONNX file (exported by Ultralytics, dynamic input) the nudenet package ships, if installed."""
    spec = importlib.util.find_spec("nudenet")
    return Path(spec.origin).parent / "320n.onnx" if spec and spec.origin else None


def pipeline_costs(calls: int = 20) -> list[dict]:
    image = (np.random.default_rng(0).uniform(0, 255, (720, 1280, 3))).astype(np.uint8)
    lines = []
    with tempfile.TemporaryDirectory() as directory:
        for name, path, extra in models(Path(directory)):
            per_backend = {}
            for backend, options in (("onnxruntime", {}), ("openvino", {"precision": "f32"}), ("opencv", {})):
                with deploykit.Detector(path, backend, conf=0.25, **extra, **options) as detector:
                    detector(image)
                    timings = []
                    for _ in range(calls):
                        detector(image)
                        timings.append(detector.last_timing)
                per_backend[backend] = {k: statistics.median(getattr(t, k) for t in timings)
                                        for k in ("pre_ms", "infer_ms", "post_ms")}  # fmt: skip
            best = min(per_backend, key=lambda b: per_backend[b]["infer_ms"])
            overhead = per_backend[best]["pre_ms"] + per_backend[best]["post_ms"]
            lines.append({
                "benchmark": "pipeline", "model": name, "image": "1280x720", "precision": "f32", "calls": calls,
                "per_backend_ms": {b: {k: round(v, 2) for k, v in t.items()} for b, t in per_backend.items()},
                "best_backend": best, "pre_plus_post_ms": round(overhead, 2),
                "share_of_best_inference": round(overhead / per_backend[best]["infer_ms"], 3), "target_share": 0.15,
            })  # fmt: skip
    return lines


def nms_cost(boxes_count: int = 10_000, calls: int = 50) -> dict:
    rng = np.random.default_rng(0)
    xy = rng.uniform(0, 600, (boxes_count, 2))
    boxes = np.concatenate([xy, xy + rng.uniform(5, 100, (boxes_count, 2))], axis=1).astype(np.float32)
    scores = rng.uniform(0.25, 1, boxes_count).astype(np.float32)
    classes = rng.integers(0, 80, boxes_count)
    for _ in range(3):
        nms(boxes, scores, classes, iou=0.45)
    timings = []
    for _ in range(calls):
        start = time.perf_counter()
        kept = nms(boxes, scores, classes, iou=0.45, max_detections=300)
        timings.append((time.perf_counter() - start) * 1e3)
    return {"benchmark": "nms", "boxes": boxes_count, "classes": 80, "kept": len(kept),
            "median_ms": round(statistics.median(timings), 3), "target_ms": 1.0}  # fmt: skip


def main() -> int:
    from pipeline_stages import measure as stage_costs

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stage-rounds", type=int, default=20, help="rounds of the stage breakdown (0: skip it)")
    arguments = parser.parse_args()
    for line in pipeline_costs():
        print(json.dumps(line), flush=True)
    print(json.dumps(nms_cost()), flush=True)
    if arguments.stage_rounds:
        print(json.dumps(stage_costs(arguments.stage_rounds)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
