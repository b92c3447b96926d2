"""LiteRT's f32, f16 and dynamic-range INT8 files beside ONNX Runtime f32, ratios within one run.

Builds MobileNetV2 (the recipe, ImageNet weights), exports it with ``deploykit export litert`` three
times (``--weights f32|f16|int8``, each verified against the reference evaluator on the Darknet sample
photos, top-1 agreement for f16/int8), then times ONNX Runtime f32 on the ``.onnx`` and LiteRT on each
``.tflite`` in the same process, interleaved: every round runs each configuration for ``--iterations``
calls after a warm-up, at 1 and 2 threads. Prints one JSON line per configuration: the median over
rounds of the p50 (ms) and of the ratio to ONNX Runtime f32 at the same threads in the same round
(below 1 is faster). Needs the converter environment (``deploykit converters add litert``).

Run: ``.venv/bin/python benchmarks/litert.py [--rounds 5] [--iterations 30]``.
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
from tests.assets.paths import darknet_image

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=30)
    args = parser.parse_args()
    from deploykit.export_litert import export_litert
    from deploykit.recipes import build

    with tempfile.TemporaryDirectory() as scratch:
        directory = Path(scratch)
        photos = directory / "photos"
        photos.mkdir()
        for name in ("dog.jpg", "eagle.jpg", "horses.jpg", "person.jpg"):
            shutil.copy(darknet_image(name), photos / name)
        model = directory / "mobilenet_v2.onnx"
        build("mobilenet_v2", model, verify_backends=[])
        files = {}
        for weights in WEIGHTS:
            done = export_litert(model, directory / f"mobilenet_v2-{weights}.tflite", weights=weights, images=photos)
            files[weights] = done.tflite
            print(json.dumps({"export": weights, "verdicts": [v.describe() for v in done.verdicts]}))
        feeds = {"images": np.random.default_rng(0).random((1, 3, 224, 224), dtype=np.float32)}
        print(json.dumps({"cpu": cpu_info().get("model"), "rounds": args.rounds, "iterations": args.iterations}))
        for threads in (1, 2):
            sessions = {"onnxruntime f32": deploykit.load(model, backend="onnxruntime", threads=threads)}
            for weights, path in files.items():
                sessions[f"litert {weights}"] = deploykit.load(path, backend="litert", threads=threads)
            rounds = [
                {key: _p50_ms(session, feeds, args.iterations) for key, session in sessions.items()}
                for _ in range(args.rounds)
            ]
            for key in sessions:
                print(json.dumps({
                    "configuration": f"{key}, {threads} thread(s)",
                    "p50_ms": round(statistics.median(r[key] for r in rounds), 2),
                    "vs_ort_f32": round(statistics.median(r[key] / r["onnxruntime f32"] for r in rounds), 2),
                    "rounds": len(rounds),
                }))  # fmt: skip
            for session in sessions.values():
                session.close()


if __name__ == "__main__":
    main()
