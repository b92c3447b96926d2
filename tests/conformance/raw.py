"""The raw runtimes, called the way their own documentation shows, keyed by backend name.

Each runner takes a model file and the case's inputs in graph-input order and returns the
outputs in graph-output order, exactly as the runtime hands them back (no conversion: that is
what deploykit is measured against). Adding a backend to the conformance suite is one function
here and one line in ``RAW_RUNNERS``; a registered backend without one fails the suite.
The runtimes compute in f32, as deploykit is asked to (``Backend.precision_options("f32")``), on
one thread (two workers share the CPUs), and ``RawRunner.options`` gives deploykit the same.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class RawRunner:
    """How the suite calls a runtime directly, and the deploykit options that configure it alike."""

    run: Callable[[Path, list[Any]], list[Any]]
    options: Mapping[str, Any] = field(default_factory=dict)


def _graph_names(model_path: Path) -> tuple[list[str], list[str]]:
    import onnx

    graph = onnx.load(str(model_path)).graph
    initializers = {i.name for i in graph.initializer}
    return [i.name for i in graph.input if i.name not in initializers], [o.name for o in graph.output]


def run_onnxruntime(model_path: Path, inputs: list[Any]) -> list[Any]:
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    session = onnxruntime.InferenceSession(str(model_path), options, providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    return list(session.run(None, dict(zip(names, inputs, strict=True))))


@cache
def _openvino_core() -> Any:
    import openvino

    return openvino.Core()


def run_openvino(model_path: Path, inputs: list[Any]) -> list[Any]:
    core = _openvino_core()
    compiled = core.compile_model(
        core.read_model(str(model_path)), "CPU", {"INFERENCE_PRECISION_HINT": "f32", "INFERENCE_NUM_THREADS": 1}
    )
    request = compiled.create_infer_request()
    results = request.infer(inputs)
    return [results[port] for port in compiled.outputs]


def run_opencv(model_path: Path, inputs: list[Any]) -> list[Any]:
    import cv2

    input_names, output_names = _graph_names(model_path)
    net = cv2.dnn.readNet(str(model_path))
    for name, value in zip(input_names, inputs, strict=True):
        net.setInput(value, name)
    return list(net.forward(output_names))


def run_reference(model_path: Path, inputs: list[Any]) -> list[Any]:
    from onnx.reference import ReferenceEvaluator

    evaluator = ReferenceEvaluator(str(model_path))
    return list(evaluator.run(None, dict(zip(evaluator.input_names, inputs, strict=True))))


RAW_RUNNERS: dict[str, RawRunner] = {
    "onnxruntime": RawRunner(run_onnxruntime, {"threads": 1}),
    "openvino": RawRunner(run_openvino, {"threads": 1}),
    "opencv": RawRunner(run_opencv),
    "reference": RawRunner(run_reference),
}
