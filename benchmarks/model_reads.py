"""How often one ``bench`` parses the ONNX file in the calling process, and what those parses cost.

Builds an image classifier with a dynamic batch whose weights make the file ``--megabytes`` large,
then runs one real ``deploykit.benchmark`` (ONNX Runtime, two batch sizes, real images, the
reference oracle) with onnx's model loaders wrapped by a counter and a timer in this process.
Worker processes are not counted: each reads the file it is sent once.

Prints one JSON line: the deploykit that ran (its package folder), the parse count, the seconds
spent parsing, the file size and the bench's wall time. Run it with this checkout's Python and with
another checkout's (``/work/main/.venv/bin/python benchmarks/model_reads.py``) to compare.

Run: ``.venv/bin/python benchmarks/model_reads.py [--megabytes 40]``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def _model(path: Path, megabytes: float) -> None:
    width = max(8, int(megabytes * 2**20 / 4 / 11))  # w1 (3, width) and w2 (width, 8): 11 floats a column
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("GlobalAveragePool", ["images"], ["pooled"]),
        helper.make_node("Flatten", ["pooled"], ["flat"]),
        helper.make_node("MatMul", ["flat", "w1"], ["hidden"]),
        helper.make_node("MatMul", ["hidden", "w2"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["probabilities"], axis=1),
    ]
    weights = [
        numpy_helper.from_array(rng.normal(0, 1, (3, width)).astype(np.float32), "w1"),
        numpy_helper.from_array(rng.normal(0, 0.01, (width, 8)).astype(np.float32), "w2"),
    ]
    graph = helper.make_graph(
        nodes,
        "wide_classifier",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["batch", 3, 32, 32])],
        [helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, ["batch", 8])],
        weights,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    model.metadata_props.add(key="deploykit.task", value="classify")
    onnx.save(model, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=float, default=40.0)
    args = parser.parse_args()
    import cv2

    import deploykit

    counted = {"parses": 0, "parse_s": 0.0}
    for name in ("load", "load_model", "load_from_string", "load_model_from_string"):
        original = getattr(onnx, name)

        def timed(*a, _original=original, **k):
            started = time.perf_counter()
            try:
                return _original(*a, **k)
            finally:
                counted["parses"] += 1
                counted["parse_s"] += time.perf_counter() - started

        setattr(onnx, name, timed)
    with tempfile.TemporaryDirectory() as directory:
        folder = Path(directory)
        model = folder / "wide.onnx"
        _model(model, args.megabytes)
        photos = folder / "photos"
        photos.mkdir()
        for index in range(2):
            image = np.random.default_rng(index).integers(0, 256, (48, 64, 3), dtype=np.uint8)
            cv2.imwrite(str(photos / f"{index}.jpg"), image)
        started = time.perf_counter()
        plan = deploykit.BenchPlan(backends=("onnxruntime",), batch=(1, 2), warmup=1, iterations=5)
        report = deploykit.benchmark(model, plan, inputs=photos)
        wall = time.perf_counter() - started
        print(json.dumps({
            "deploykit": str(Path(deploykit.__file__).parent),
            "parses_in_parent": counted["parses"],
            "parse_s": round(counted["parse_s"], 4),
            "model_bytes": model.stat().st_size,
            "bench_wall_s": round(wall, 2),
            "verdicts": [row.verdict.status if row.verdict else row.status for row in report.rows],
        }))  # fmt: skip


if __name__ == "__main__":
    main()
