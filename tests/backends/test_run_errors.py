"""A runtime that fails while running says why, the same way it does on load: OpenVINO's reason
(not the C++ source location its message starts with), OpenCV's text for a refused input (its
``setInput`` is inside the translation), the runtime's words with no stray marks."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import deploykit
from deploykit.backends.registry import get_backend
from deploykit.errors import DeployKitError, UnsupportedModelError


def _need(backend: str) -> None:
    if not get_backend(backend).is_available():
        pytest.skip(str(get_backend(backend).unavailable_reason()))


def _save(path: Path, nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto], outputs, opset: int = 21) -> Path:
    graph = helper.make_graph(nodes, path.stem, inputs, outputs)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10), path)
    return path


def test_openvino_run_errors_say_the_reason_not_the_source_location(tmp_path: Path) -> None:
    """``test_castlike_FLOAT_to_FLOAT16``: OpenVINO folds CastLike's empty 'like' input away, and
    reshaping the model for the feed fails with a message that begins 'Exception from
    src/core/src/model.cpp:758:' (what deploykit used to report); the reason is below it."""
    _need("openvino")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])
    like = helper.make_tensor_value_info("like", TensorProto.FLOAT16, [0])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT16, [3, 4])
    path = _save(tmp_path / "castlike.onnx", [helper.make_node("CastLike", ["x", "like"], ["y"])], [x, like], [y])
    with pytest.raises(DeployKitError) as failed:  # 'like' has the static size 0: compiled (and dropped) at load
        with deploykit.load(path, "openvino") as session:
            session.run({"x": np.ones((3, 4), np.float32), "like": np.zeros(0, np.float16)})
    assert failed.value.message.startswith(
        "backend 'openvino' | the compiled model has no input port for graph input 'like'"
    )


def test_opencv_refusing_an_input_says_why(tmp_path: Path) -> None:
    """OpenCV's setInput takes no bfloat16 array: its own overload message, not a bare function name."""
    _need("opencv")
    x = helper.make_tensor_value_info("x", TensorProto.BFLOAT16, [3])
    y = helper.make_tensor_value_info("y", TensorProto.BFLOAT16, [3])
    path = _save(tmp_path / "relu_bf16.onnx", [helper.make_node("Relu", ["x"], ["y"])], [x], [y], opset=14)
    try:
        session = deploykit.load(path, "opencv")
    except UnsupportedModelError as refused:  # an OpenCV that refuses the graph on import says why there
        assert "relu_bf16.onnx': " in refused.message and len(refused.message.split("': ", 1)[1]) > 10
        return
    with session, pytest.raises(UnsupportedModelError) as failed:
        session.run({"x": np.ones(3, ml_dtypes.bfloat16)})
    message = failed.value.message
    assert message.startswith("backend 'opencv' on cpu | failed to run 'relu_bf16.onnx': "), message
    assert "setInput" in message and "Overload resolution failed" in message, message
    assert " > " not in message and not message.endswith(">.")  # OpenCV's continuation marks are dropped
