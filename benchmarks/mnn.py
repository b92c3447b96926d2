"""MNN f32 next to ONNX Runtime f32 at 1 and 2 threads, on MobileNetV2 and the official YOLOv4-tiny.

Three configurations per thread count: ONNX Runtime, MNN as deploykit opens it by default (Winograd
off: its f32 then passes element-wise against the oracle) and MNN with ``winograd=true`` (MNN's own
default: faster 3×3 convolutions whose results move by ~1e-4 relative, judged by cosine/SNR). Each
round is one ``deploykit.benchmark`` call per configuration (its own worker process), in a rotated
order, verified against onnx's reference evaluator in the first round; ``vs_ort_f32`` is a
configuration's p50 over ONNX Runtime's p50 at the same thread count in the same round, median over
rounds (below 1 is faster). Prints one JSON line per configuration.

Run: ``.venv/bin/python benchmarks/mnn.py [--rounds 5] [--iterations 30]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import deploykit
from deploykit.bench.fingerprint import cpu_info

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo, for tests.assets
from tests.assets.paths import official_darknet

CONFIGURATIONS: dict[str, tuple[str, dict[str, Any]]] = {
    "onnxruntime f32": ("onnxruntime", {}),
    "mnn f32": ("mnn", {"precision": "f32"}),
    "mnn f32 winograd": ("mnn", {"precision": "f32", "winograd": True}),
}


def _models(directory: Path) -> dict[str, Path]:
    from deploykit.convert.darknet.convert import convert_darknet
    from deploykit.recipes import build

    mobilenet = directory / "mobilenet_v2.onnx"
    build("mobilenet_v2", mobilenet, verify_backends=[])
    cfg, weights, names = official_darknet("yolov4-tiny")
    yolov4 = directory / "yolov4-tiny.onnx"
    convert_darknet(cfg, weights, yolov4, labels=names, verify_backends=[])
    return {"mobilenet_v2": mobilenet, "yolov4-tiny": yolov4}


def _measure(model: Path, name: str, threads: int, iterations: int, verify: bool) -> tuple[float, str | None]:
    backend, options = CONFIGURATIONS[name]
    plan = deploykit.BenchPlan(backends=(backend,), threads=threads, iterations=iterations, warmup=5,
                               options=options, oracle="auto" if verify else "none")  # fmt: skip
    report = deploykit.benchmark(model, plan)
    (row,) = [r for r in report.ok_rows() if r.latency is not None]
    verdict = row.verdict.status + f" ({row.verdict.rule})" if verify and row.verdict else None
    return row.latency.p50_ms, verdict


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=30)
    args = parser.parse_args()
    print(json.dumps({"cpu": cpu_info().get("model"), "rounds": args.rounds, "iterations": args.iterations,
                      "runtimes": [deploykit.get_backend(b).version() for b in ("onnxruntime", "mnn")]}))  # fmt: skip
    names = list(CONFIGURATIONS)
    with tempfile.TemporaryDirectory() as scratch:
        for model_name, model in _models(Path(scratch)).items():
            for threads in (1, 2):
                p50s: dict[str, list[float]] = {n: [] for n in names}
                ratios: dict[str, list[float]] = {n: [] for n in names}
                verdicts: dict[str, str | None] = {}
                for index in range(args.rounds):
                    order = names[index % len(names) :] + names[: index % len(names)]
                    measured = {}
                    for name in order:
                        measured[name], verdict = _measure(model, name, threads, args.iterations, index == 0)
                        verdicts.setdefault(name, verdict)
                    for name in names:
                        p50s[name].append(measured[name])
                        ratios[name].append(measured[name] / measured["onnxruntime f32"])
                for name in names:
                    print(json.dumps({
                        "model": model_name, "threads": threads, "configuration": name, "verdict": verdicts[name],
                        "p50_ms": round(statistics.median(p50s[name]), 2),
                        "p50_spread_ms": [round(min(p50s[name]), 2), round(max(p50s[name]), 2)],
                        "vs_ort_f32": round(statistics.median(ratios[name]), 2), "rounds": args.rounds,
                    }), flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
