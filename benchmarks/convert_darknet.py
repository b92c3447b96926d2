"""Darknet conversion speed and memory, and the converted model's latency against OpenCV 4.x running
the same cfg + weights natively.

1. ``convert``: yolov4 (≈64 M parameters, ≈257 MB of weights) converted in a fresh subprocess, without
   verification: wall time and peak RSS (VmHWM). Targets: < 3 s, peak RSS < 2x the weights file.
2. ``latency``: yolov4-tiny converted, then each backend (f32) and OpenCV's readNetFromDarknet run the
   same input, interleaved in one process, median of N calls. Needs an OpenCV with
   readNetFromDarknet for the native row: run with ``PYTHONPATH=.cv4`` (OpenCV 4.14).

Prints one JSON line per measurement. Run: ``PYTHONPATH=.cv4 .venv/bin/python benchmarks/convert_darknet.py``.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def convert_once(cfg: str, weights: str, output: str) -> None:
    from deploykit.convert.darknet.convert import convert_darknet

    start = time.perf_counter()
    convert_darknet(cfg, weights, output, verify_backends=[])
    seconds = time.perf_counter() - start
    peak = next(
        int(line.split()[1]) * 1024
        for line in Path("/proc/self/status").read_text().splitlines()
        if line.startswith("VmHWM:")
    )
    print(json.dumps({"seconds": seconds, "peak_rss_bytes": peak}))


def conversion(directory: Path) -> dict:
    from deploykit.convert.darknet.convert import load_network
    from deploykit.convert.darknet.weights import write_random_weights

    cfg = REPO / "models" / "darknet" / "yolov4.cfg"
    weights = directory / "yolov4.weights"
    net = load_network(cfg)
    write_random_weights(net, weights, seed=0)
    out = directory / "yolov4.onnx"
    completed = subprocess.run(
        [sys.executable, __file__, "--convert-once", str(cfg), str(weights), str(out)],
        capture_output=True,
        text=True,
        check=True,
    )
    measured = json.loads(completed.stdout.strip().splitlines()[-1])
    size = weights.stat().st_size
    return {
        "benchmark": "convert_darknet",
        "model": "yolov4",
        "parameters": net.parameter_count,
        "weights_bytes": size,
        "onnx_bytes": out.stat().st_size,
        "seconds": round(measured["seconds"], 3),
        "peak_rss_bytes": measured["peak_rss_bytes"],
        "peak_rss_over_weights": round(measured["peak_rss_bytes"] / size, 2),
        "targets": {"seconds": 3.0, "peak_rss_over_weights": 2.0},
    }


def latency(directory: Path, calls: int = 30) -> list[dict]:
    import cv2

    import deploykit
    from deploykit.convert.darknet.convert import DarknetExportSettings, convert_darknet, load_network
    from deploykit.convert.darknet.weights import write_random_weights

    cfg = REPO / "models" / "darknet" / "yolov4-tiny.cfg"
    weights = directory / "yolov4-tiny.weights"
    write_random_weights(load_network(cfg), weights, seed=0)
    onnx_path = directory / "yolov4-tiny.onnx"
    convert_darknet(cfg, weights, onnx_path, verify_backends=[], export=DarknetExportSettings(head="raw"))
    image = np.random.default_rng(0).uniform(0, 1, (1, 3, 416, 416)).astype(np.float32)
    runners = {}
    sessions = []
    # ORT's idle threads spin by default and would steal the CPU from the runtimes interleaved with it
    for backend, options in (("onnxruntime", {"spinning": False}), ("openvino", {"precision": "f32"}), ("opencv", {})):
        session = deploykit.load(onnx_path, backend, **options)
        sessions.append(session)
        runners[f"{backend} (converted ONNX)"] = (lambda s=session: s.run({"images": image}), session.info.precision)
    if hasattr(cv2.dnn, "readNetFromDarknet"):
        net = cv2.dnn.readNetFromDarknet(str(cfg), str(weights))
        names = net.getUnconnectedOutLayersNames()

        def native():
            net.setInput(image)
            return net.forward(names)

        runners[f"opencv {cv2.__version__} readNetFromDarknet (native)"] = (native, "f32")
    samples: dict[str, list[float]] = {name: [] for name in runners}
    for run, _ in runners.values():
        for _ in range(3):
            run()
    for _ in range(calls):
        for name, (run, _) in runners.items():
            start = time.perf_counter()
            run()
            samples[name].append((time.perf_counter() - start) * 1e3)
    for session in sessions:
        session.close()
    return [
        {
            "benchmark": "darknet_latency",
            "model": "yolov4-tiny 416x416",
            "runner": name,
            "precision": precision,
            "calls": calls,
            "median_ms": round(statistics.median(samples[name]), 2),
            "p90_ms": round(float(np.percentile(samples[name], 90)), 2),
            "opencv": cv2.__version__,
        }
        for name, (_, precision) in runners.items()
    ]


def main() -> int:
    if len(sys.argv) == 5 and sys.argv[1] == "--convert-once":
        convert_once(*sys.argv[2:])
        return 0
    with tempfile.TemporaryDirectory() as directory:
        print(json.dumps(conversion(Path(directory))), flush=True)
        for line in latency(Path(directory)):
            print(json.dumps(line), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
