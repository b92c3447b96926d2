"""No tax on the fast path: ``deploykit bench`` against OpenVINO's own ``benchmark_app``, same model, same run.

For each precision (f32, and bf16 where the CPU has it), rounds alternate between
``deploykit.benchmark`` (exactly what ``deploykit bench -b openvino:CPU --precision P`` runs: an
isolated worker, the session's public ``run``) and ``benchmark_app -api sync -hint latency
-infer_precision P`` (ships in the openvino wheel). The medians of the rounds' p50/median
latencies are compared; the target is deploykit within 3 % of benchmark_app. A second line per
precision compares ONNX Runtime's raw ``InferenceSession.run`` with deploykit's session in one
process (the wrapper's own cost).

Default model: the yolov4-tiny recipe (official COCO weights, 416×416), built into a scratch folder.
Prints one JSON line per measurement. Run:
``.venv/bin/python benchmarks/fast_path.py [--model M.onnx] [--rounds 5] [--iterations 200]``.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from deploykit.bench.runner import benchmark


def cpu_has_bf16() -> bool:
    import openvino as ov

    return "BF16" in ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")


def benchmark_app_median_ms(model: Path, precision: str, iterations: int) -> float:
    tool = Path(sys.executable).parent / "benchmark_app"
    completed = subprocess.run(
        [str(tool), "-m", str(model), "-d", "CPU", "-api", "sync", "-hint", "latency", "-niter", str(iterations),
         "-infer_precision", precision],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    match = re.search(r"Median:\s+([\d.]+) ms", completed.stdout)
    if match is None:
        raise RuntimeError(f"benchmark_app printed no median:\n{completed.stdout[-2000:]}")
    return float(match.group(1))


def deploykit_p50_ms(model: Path, precision: str, iterations: int) -> float:
    result = benchmark(model, ["openvino:CPU"], precision=precision, iterations=iterations, warmup=20, isolate=True)
    row = result.data["rows"][0]
    if row["status"] != "ok":
        raise RuntimeError(row["error"])
    assert row["session"]["precision"] == precision, row["session"]
    return float(row["latency"]["p50_ms"])


def openvino_line(model: Path, precision: str, rounds: int, iterations: int) -> dict:
    ours, theirs = [], []
    for _ in range(rounds):
        ours.append(deploykit_p50_ms(model, precision, iterations))
        theirs.append(benchmark_app_median_ms(model, precision, iterations))
    deploykit_ms, app_ms = statistics.median(ours), statistics.median(theirs)
    return {
        "benchmark": "fast_path",
        "backend": "openvino:CPU",
        "model": model.name,
        "precision": precision,
        "deploykit_bench_p50_ms": round(deploykit_ms, 3),
        "benchmark_app_median_ms": round(app_ms, 3),
        "overhead_pct": round(100 * (deploykit_ms / app_ms - 1), 1),
        "target_pct": 3.0,
        "rounds": {"deploykit": [round(v, 3) for v in ours], "benchmark_app": [round(v, 3) for v in theirs]},
        "iterations": iterations,
    }


def onnxruntime_line(model: Path, rounds: int, iterations: int) -> dict:
    """Raw InferenceSession.run against deploykit's session.run, interleaved in one process."""
    import onnxruntime as ort

    import deploykit

    raw = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    name = raw.get_inputs()[0].name
    shape = [d if isinstance(d, int) else 1 for d in raw.get_inputs()[0].shape]
    feeds = {name: np.random.default_rng(0).random(shape, dtype=np.float32)}
    session = deploykit.load(model, "onnxruntime")
    calls = {"raw": lambda: raw.run(None, feeds), "deploykit": lambda: session.run(feeds)}
    for call in calls.values():
        for _ in range(10):
            call()
    medians: dict[str, list[float]] = {k: [] for k in calls}
    for _ in range(rounds):
        for key, call in calls.items():
            samples = []
            for _ in range(iterations // rounds or 1):
                start = time.perf_counter()
                call()
                samples.append(time.perf_counter() - start)
            medians[key].append(statistics.median(samples) * 1e3)
    session.close()
    ours, theirs = statistics.median(medians["deploykit"]), statistics.median(medians["raw"])
    return {
        "benchmark": "fast_path",
        "backend": "onnxruntime:cpu",
        "model": model.name,
        "precision": "f32",
        "deploykit_run_p50_ms": round(ours, 3),
        "raw_inference_session_p50_ms": round(theirs, 3),
        "overhead_pct": round(100 * (ours / theirs - 1), 1),
        "iterations": iterations,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, help="an .onnx file (default: the yolov4-tiny recipe)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="deploykit-fast-path-") as scratch:
        model = args.model
        if model is None:
            from deploykit.recipes import build

            model = Path(scratch) / "yolov4-tiny.onnx"
            build("yolov4-tiny", model, verify_backends=("onnxruntime",))
        precisions = ["f32", "bf16"] if cpu_has_bf16() else ["f32"]
        for precision in precisions:
            print(json.dumps(openvino_line(model, precision, args.rounds, args.iterations)), flush=True)
        print(json.dumps(onnxruntime_line(model, args.rounds, args.iterations)), flush=True)


if __name__ == "__main__":
    main()
