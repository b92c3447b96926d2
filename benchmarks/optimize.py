"""``deploykit optimize`` on the official YOLOv4-tiny (416) and MobileNetV2: the chosen configuration's
speed against ONNX Runtime f32 measured in the same run, the whole search's wall time, stability
over two runs, and what opening the bundle costs over ``deploykit.load``.

Photos: every real photo that ships offline (``benchmarks/quantize.py``'s ``offline_photos``), one
file each (no views: optimize splits by file, so a view of a calibration photo must not be judged).
``--max-drop 1%``: mAP@0.5 against the f32 detections (YOLOv4-tiny), top-1 agreement (MobileNetV2),
on the held-out half. Prints one JSON line per model × run, then one per model for the bundle open.
Each run measures under one background load (``--loads 0,1``: idle, then 1 busy thread, a spin
loop in its own process): the two choices are compared (same, or overlapping intervals), and each
line carries the decision's evidence (rounds / blocks / calls of the chosen and the baseline).
Run: ``.venv/bin/python benchmarks/optimize.py [--models yolov4-tiny,mobilenet_v2] [--loads 0,1]
[--time-budget 5m]``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import deploykit
from deploykit.optimize import OptimizePlan, optimize, read_bundle
from deploykit.recipes import build


def photo_folder(scratch: Path) -> Path:
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from quantize import offline_photos  # the same photos as the quantize benchmark

    folder = scratch / "photos"
    folder.mkdir()
    for index, photo in enumerate(offline_photos()):
        shutil.copy(photo, folder / f"{index:03d}-{photo.name}")
    return folder


def open_overhead(bundle: Path, repeats: int = 15) -> dict:
    """Median time to open the bundle vs deploykit.load of its model with the same settings (interleaved)."""
    from deploykit.optimize.bundle import read_bundle

    chosen = read_bundle(bundle)
    manifest = chosen.manifest
    bundle_ms, load_ms = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        with deploykit.load(bundle):
            bundle_ms.append((time.perf_counter() - start) * 1e3)
        start = time.perf_counter()
        with deploykit.load(chosen.model_path, manifest.backend, manifest.device, **manifest.options):
            load_ms.append((time.perf_counter() - start) * 1e3)
    return {"bundle_open_ms": round(statistics.median(bundle_ms), 2), "load_ms": round(statistics.median(load_ms), 2),
            "overhead_ms": round(statistics.median(bundle_ms) - statistics.median(load_ms), 2)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", default="yolov4-tiny,mobilenet_v2")
    parser.add_argument("--loads", default="0,1", help="busy threads per run, e.g. 0,1 (idle, then loaded)")
    parser.add_argument("--time-budget", default="5m")
    parser.add_argument("--max-drop", default="1%")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="deploykit-bench-optimize-") as scratch_dir:
        scratch = Path(scratch_dir)
        photos = photo_folder(scratch)
        for name in args.models.split(","):
            model = scratch / f"{name}.onnx"
            build(name, model, verify_backends=("onnxruntime",))
            chosen = []
            for run, load in enumerate((int(n) for n in args.loads.split(",")), start=1):
                output = scratch / f"{name}-run{run}"
                started = time.perf_counter()
                plan = OptimizePlan(max_drop=args.max_drop, time_budget=args.time_budget, background_load=load)
                report = optimize(model, photos, plan, output=output)
                wall = time.perf_counter() - started
                best = report.best
                chosen.append(best)
                baseline = report.candidate(report.baseline.label) if report.baseline else None
                print(json.dumps({
                    "model": name, "run": run, "background_load": load, "chosen": best.label,
                    "compute": read_bundle(output).manifest.compute, "decision": report.decision.decision,
                    "why": report.decision.reason, "p50_ms": best.headline.to_dict() if best.headline else None,
                    "evidence": best.evidence(), "baseline_evidence": baseline.evidence() if baseline else None,
                    "accuracy_delta": best.accuracy_delta, "metric": report.metric,
                    "accuracy_interval": best.accuracy_interval.to_dict() if best.accuracy_interval else None,
                    "accuracy_images": report.settings.accuracy_images,
                    "baseline": report.baseline.label if report.baseline else None,
                    "baseline_p50_ms": report.baseline.headline.estimate if report.baseline else None,
                    "speedup_vs_ort_f32": report.baseline.speedup if report.baseline else None,
                    "candidates": len(report.candidates),
                    "screened": sum(1 for c in report.candidates if c.rounds),
                    "finalists": sum(c.status != "stopped" for c in report.candidates),
                    "unmeasured": {c.label: c.reason for c in report.candidates if not c.rounds},
                    "optimize_wall_s": round(wall, 1), "partial": report.partial,
                }), flush=True)  # fmt: skip
            if len(chosen) >= 2:
                first, second = chosen[0], chosen[1]
                overlap = (first.headline is not None and second.headline is not None
                           and not first.headline.separated_from(second.headline))  # fmt: skip
                print(json.dumps({"model": name, "stability": {"same_choice": first.label == second.label,
                                  "choices": [first.label, second.label], "intervals_overlap": overlap}}),
                      flush=True)  # fmt: skip
            print(json.dumps({"model": name, "open": open_overhead(scratch / f"{name}-run1")}), flush=True)


if __name__ == "__main__":
    main()
