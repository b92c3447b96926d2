"""No tax on the fast path: ``deploykit bench`` against OpenVINO's own ``benchmark_app``, same model, same run.

For each precision (f32, and bf16 where the CPU has it), rounds alternate between
``deploykit.benchmark`` (exactly what ``deploykit bench -b openvino:CPU --precision P`` runs: an
isolated worker, the session's public ``run``) and ``benchmark_app -api sync -hint latency
-infer_precision P`` (ships in the openvino wheel). The medians of the rounds' p50/median
latencies are compared; the target is deploykit within 3 % of benchmark_app. A second line per
precision alternates OpenVINO's raw sync ``request.infer()`` (benchmark_app's loop) with
deploykit's ``session.run`` call by call in one process, which a busy machine slows alike; a last
line does the same for ONNX Runtime's raw ``InferenceSession.run``.

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

from deploykit.bench.plan import BenchPlan
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
    result = benchmark(
        model, BenchPlan(backends=["openvino:CPU"], precision=precision, iterations=iterations, warmup=20, isolate=True)
    )
    row = result.rows[0]
    if not row.ok:
        raise RuntimeError(row.error)
    assert row.precision == precision, row.session
    return row.latency_ms("p50_ms")


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


def openvino_interleaved_line(model: Path, precision: str, calls: int) -> dict:
    """benchmark_app's sync loop (``request.infer()`` on tensors set once) against deploykit's
    ``session.run(feeds)``, alternating call by call in one process, so that a busy machine slows
    both alike; medians of ``calls`` calls each."""
    import openvino as ov

    import deploykit

    session = deploykit.load(model, "openvino", precision=precision)
    # the raw loop runs the session's own compiled model: two compiled models in one process
    # would each pin and spin threads on the same cores, and the second to run would pay for it
    compiled = session._static.compiled  # type: ignore[attr-defined]
    request = compiled.create_infer_request()
    x = np.random.default_rng(0).random(tuple(compiled.inputs[0].get_shape()), dtype=np.float32)
    request.set_input_tensor(0, ov.Tensor(x))
    feeds = {next(iter(session.inputs)): x}
    loops = {"benchmark_app_loop": request.infer, "deploykit": lambda: session.run(feeds)}
    for call in loops.values():
        for _ in range(20):
            call()
    samples: dict[str, list[float]] = {k: [] for k in loops}
    for _ in range(calls):
        for key, call in loops.items():
            start = time.perf_counter()
            call()
            samples[key].append(time.perf_counter() - start)
    assert session.info.precision == precision, session.info
    session.close()
    ours, theirs = (statistics.median(samples[k]) * 1e3 for k in ("deploykit", "benchmark_app_loop"))
    return {
        "benchmark": "fast_path_interleaved",
        "backend": "openvino:CPU",
        "model": model.name,
        "precision": precision,
        "deploykit_run_p50_ms": round(ours, 3),
        "raw_request_infer_p50_ms": round(theirs, 3),
        "overhead_pct": round(100 * (ours / theirs - 1), 1),
        "target_pct": 3.0,
        "calls": calls,
    }


def onnxruntime_line(model: Path, iterations: int) -> dict:
    """Raw InferenceSession.run against deploykit's session.run, alternating call by call in one process."""
    import deploykit

    session = deploykit.load(model, "onnxruntime")
    raw = session._session  # type: ignore[attr-defined]  # the same runtime session (see above)
    name = raw.get_inputs()[0].name
    shape = [d if isinstance(d, int) else 1 for d in raw.get_inputs()[0].shape]
    feeds = {name: np.random.default_rng(0).random(shape, dtype=np.float32)}
    calls = {"raw": lambda: raw.run(None, feeds), "deploykit": lambda: session.run(feeds)}
    for call in calls.values():
        for _ in range(10):
            call()
    samples: dict[str, list[float]] = {k: [] for k in calls}
    for _ in range(iterations):
        for key, call in calls.items():
            start = time.perf_counter()
            call()
            samples[key].append(time.perf_counter() - start)
    session.close()
    ours, theirs = (statistics.median(samples[k]) * 1e3 for k in ("deploykit", "raw"))
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
            print(json.dumps(openvino_interleaved_line(model, precision, args.iterations * 2)), flush=True)
        print(json.dumps(onnxruntime_line(model, args.iterations * 2)), flush=True)


if __name__ == "__main__":
    main()
