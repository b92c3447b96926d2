"""Per-call overhead of ``Session.run`` over the raw runtime call, per backend.

Two models: a ~10 µs one (three element-wise ops on 2x3 tensors) and a ~1 ms one
(the demo classifier at 128x128). Raw and wrapped calls are interleaved in one
process and the medians of many calls compared. Prints one JSON line per
backend and model. Run: ``.venv/bin/python benchmarks/overhead.py``.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo, for tests.assets

import deploykit
from tests.assets.samples import tiny_classifier


def tiny_model(path: Path) -> Path:
    spec = [2, 3]
    graph = helper.make_graph(
        [
            helper.make_node("Add", ["a", "b"], ["s"]),
            helper.make_node("Mul", ["a", "b"], ["p"]),
        ],
        "tiny",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, spec) for n in ("a", "b")],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, spec) for n in ("s", "p")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def raw_call(session: deploykit.Session):
    """The runtime's own call, as a user of that runtime alone would write it."""
    backend = session.info.backend
    if backend == "onnxruntime":
        inner = session._session
        names = [o.name for o in inner.get_outputs()]
        return lambda feeds: inner.run(names, feeds)
    if backend == "openvino":
        compiled = session._static or next(iter(session._by_shape.values()))
        request = compiled.compiled.create_infer_request()
        return lambda feeds: request.infer(feeds)
    if backend == "opencv":
        net = session._net
        names = list(session.outputs)

        def forward(feeds):
            for name, array in feeds.items():
                net.setInput(array, name)
            return net.forward(names)

        return forward
    raise ValueError(backend)


def measure(path: Path, backend: str, feeds: dict, calls: int) -> dict:
    options = {"precision": "f32"} if backend == "openvino" else {}
    with deploykit.load(path, backend, threads=1, **options) as session:
        session.run(feeds)  # OpenVINO compiles a dynamic model for this shape on the first run
        raw = raw_call(session)
        for _ in range(max(20, calls // 10)):
            raw(feeds)
            session.run(feeds)
        raw_ns, wrapped_ns = [], []
        for _ in range(calls):
            start = time.perf_counter_ns()
            raw(feeds)
            middle = time.perf_counter_ns()
            session.run(feeds)
            end = time.perf_counter_ns()
            raw_ns.append(middle - start)
            wrapped_ns.append(end - middle)
        info = session.info
    raw_us = statistics.median(raw_ns) / 1e3
    wrapped_us = statistics.median(wrapped_ns) / 1e3
    return {
        "benchmark": "overhead",
        "model": path.stem,
        "backend": backend,
        "device": info.device,
        "precision": info.precision,
        "threads": 1,
        "calls": calls,
        "raw_median_us": round(raw_us, 2),
        "session_median_us": round(wrapped_us, 2),
        "added_us": round(wrapped_us - raw_us, 2),
        "added_percent": round(100 * (wrapped_us - raw_us) / raw_us, 2),
    }


def main() -> int:
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as directory:
        small = tiny_model(Path(directory) / "elementwise_10us.onnx")
        large = Path(directory) / "classifier_1ms.onnx"
        onnx.save(tiny_classifier(size=128), large)
        cases = [
            (small, {n: rng.uniform(-1, 1, (2, 3)).astype(np.float32) for n in ("a", "b")}, 20000),
            (large, {"images": rng.uniform(-1, 1, (1, 3, 128, 128)).astype(np.float32)}, 1000),
        ]
        for backend in ("onnxruntime", "openvino", "opencv"):
            if not deploykit.get_backend(backend).is_available():
                continue
            for path, feeds, calls in cases:
                print(json.dumps(measure(path, backend, feeds, calls)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
